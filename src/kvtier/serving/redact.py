"""Secrets never reach a record: values of key/token/secret/password-like arguments and variables.

The harness records the server's command and environment in run.yaml and copies its log, all of
which end up pinned in raw/. Anything whose name looks like a credential is replaced by a marker,
and every such value is scrubbed from text (vLLM echoes its arguments in the log).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Mapping

# "token" only at the end of a name: HF_TOKEN and --hf-token are secrets, --tokenizer and
# --max-num-batched-tokens are not.
SECRET_NAME = re.compile(r"(api[-_]?key|(^|[-_])token$|secret|passw(or)?d|credential)", re.IGNORECASE)
MARK = "<redacted>"


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name.lstrip("-")))


def secret_values(argv: Iterable[str], env: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-named `--flag=value` / `--flag value` arguments and NAME=value variables."""
    args, out = list(argv), []
    for i, a in enumerate(args):
        if a.startswith("--") and is_secret_name(a.split("=", 1)[0]):
            if "=" in a:
                out.append(a.split("=", 1)[1])
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                out.append(args[i + 1])
    out += [v for k, v in (env or {}).items() if is_secret_name(k)]
    return sorted({v for v in out if v}, key=len, reverse=True)


def redact_argv(argv: Iterable[str]) -> list[str]:
    args, out = list(argv), []
    hide_next = False
    for a in args:
        if hide_next and not a.startswith("--"):
            out.append(MARK)
            hide_next = False
            continue
        hide_next = False
        if a.startswith("--") and is_secret_name(a.split("=", 1)[0]):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=" + MARK)
            else:
                out.append(a)
                hide_next = True
        else:
            out.append(a)
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MARK if is_secret_name(k) and v else v) for k, v in env.items()}


def scrub(text: str, secrets: Iterable[str]) -> str:
    for s in secrets:
        text = text.replace(s, MARK)
    return text


def scrub_file(path: str | Path, secrets: Iterable[str]) -> bool:
    """Rewrite a log copy without the secrets; True if anything was replaced."""
    secrets = [s for s in secrets if s]
    p = Path(path)
    if not secrets or not p.exists():
        return False
    text = p.read_text(encoding="utf-8", errors="replace")
    clean = scrub(text, secrets)
    if clean != text:
        p.write_text(clean, encoding="utf-8")
        return True
    return False
