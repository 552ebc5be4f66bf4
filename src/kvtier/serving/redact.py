"""Secrets never reach a record: values of key/token/secret/password-like arguments and variables,
and credentials inside URLs.

The harness records the server's command and environment in run.yaml and copies its log, all of
which end up pinned in raw/. Anything whose name looks like a credential is replaced by a marker,
and every such value is scrubbed from text (vLLM echoes its arguments in the log). A URL's
`user:password@` and the values of credential-like query parameters (`?api_key=`, `&sig=`,
`X-Amz-Signature=`, ...) are replaced wherever they appear: in a URL given on the command line, in
a server argument or variable, in an error message, in the copied log (`scrub_urls`, `record`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Mapping

# "token" only at the end of a name: HF_TOKEN and --hf-token are secrets, --tokenizer and
# --max-num-batched-tokens are not.
SECRET_NAME = re.compile(r"(api[-_]?key|(^|[-_])token$|secret|passw(or)?d|credential)", re.IGNORECASE)
MARK = "<redacted>"
# scheme://user[:password]@ : the user-info part of a URL (RFC 3986 3.2.1)
URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/?#\s@]+@)")
# ?name=value or &name=value where the name is credential-like (or a signed URL's part)
QUERY_SECRET = re.compile(r"(?P<lead>[?&;](?P<name>[^=&#\s?;]+)=)(?P<value>[^&#\s;'\"]*)")
QUERY_NAME = re.compile(r"^(key|sig|signature|auth|authorization|access[-_]?token|code|x-amz-(signature|credential|security-token)"
                        r"|x-goog-(signature|credential))$", re.IGNORECASE)


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
    args, out = [scrub_urls(a) for a in argv], []
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
    return {k: (MARK if is_secret_name(k) and v else scrub_urls(v)) for k, v in env.items()}


def _secret_query(name: str) -> bool:
    return is_secret_name(name) or bool(QUERY_NAME.match(name))


def scrub_urls(text: str) -> str:
    """`text` with every URL's user-info and every credential-like query value replaced by MARK."""
    if "@" in text:
        text = URL_USERINFO.sub(lambda m: m.group("scheme") + MARK + "@", text)
    if "=" in text:
        text = QUERY_SECRET.sub(lambda m: m.group("lead") + (MARK if _secret_query(m.group("name")) and m.group("value")
                                                             else m.group("value")), text)
    return text


def record(value: Any) -> Any:
    """A record (dicts, lists, strings) with scrub_urls applied to every string, keys included:
    what a run writes into run.yaml or a JSON Lines log."""
    if isinstance(value, str):
        return scrub_urls(value)
    if isinstance(value, dict):
        return {record(k): record(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(record(v) for v in value)
    return value


def scrub(text: str, secrets: Iterable[str]) -> str:
    for s in secrets:
        text = text.replace(s, MARK)
    return scrub_urls(text)


def scrub_file(path: str | Path, secrets: Iterable[str]) -> bool:
    """Rewrite a log copy without the secrets and URL credentials; True if anything was replaced."""
    secrets = [s for s in secrets if s]
    p = Path(path)
    if not p.exists():
        return False
    text = p.read_text(encoding="utf-8", errors="replace")
    clean = scrub(text, secrets)
    if clean != text:
        p.write_text(clean, encoding="utf-8")
        return True
    return False
