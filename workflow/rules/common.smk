from pathlib import Path

# Shared by every .smk file. Each domain file registers what the paper needs, as follows.
#   NUMBERS.append("results/numbers/<topic>.json")   every numbers file
#   FIGURES["fig1a"] = "figures/fig1a.svg"             every figure the note embeds
#   LAB_FIGURES["lab_ttft"] = "figures/lab_ttft.svg"   every figure the lab embeds
#   EXTRA_TARGETS.append(path)                       further outputs of the default target
# Input functions read these lists lazily, after every rule file has been included.

from kvtier.runfolder import resolve_id
from kvtier.pins import Pins, report_unpinned
from kvtier.snake import activated, code_digest, end_scheduler_timers

NUMBERS: list[str] = []
FIGURES: dict[str, str] = {}
LAB_FIGURES: dict[str, str] = {}
EXTRA_TARGETS: list[str] = []
ANALYSIS_ENV = "../../envs/analysis.yaml"
MANIFEST = config["manifest"]
# The manifest, read once. Pinned files are checked by content on every invocation (mtimes miss an
# edit that kept them): a file is hashed again unless its stat identity, ctime included, is the one
# it had when it last hashed to its pin (kvtier.pins). Each domain rule takes, instead of the whole
# manifest, its stamp: the rows of the raw files it reads (PINS.stamp), rewritten only when one of
# them changes, so re-pinning one domain's record reruns that domain's rules only.
PINS = Pins(MANIFEST)
report_unpinned(PINS.check(), MANIFEST, PINS.pinned_failed())
# Every rule depends on the package's code, so a change in an analysis reruns what it feeds
# (Snakemake itself only tracks the rule's own script): one digest of every source file, rewritten
# on each invocation only when a file's content changed (kvtier.snake.code_digest).
PACKAGE_CODE = code_digest("src/kvtier")
# The id of the new run folder(s) each experiment writes, from config run_id ("auto" gives a fresh
# UTC date-time with a random suffix on every invocation). It travels in the marker names ({run}),
# so a job run elsewhere (a cluster profile re-reads this file) writes the same folder.
RUN_ID = resolve_id(config["run_id"])


def numbers_files(wildcards):
    return sorted(NUMBERS)


def all_targets(wildcards):
    return sorted(EXTRA_TARGETS)


def template_files(wildcards):
    """Every template, so editing a section re-renders (the folder itself is `ancient`)."""
    return sorted(str(p) for p in Path("paper/templates").rglob("*.j2"))


# The documents paper.smk's publish rule renders.
DOCUMENTS = {
    "note": {"template": "note.md.j2", "title": "A Host-RAM Tier for the KV Cache"},
    "validation": {
        "template": "validation.md.j2",
        "title": "A Host-RAM Tier for the KV Cache: what this artifact measured and modelled beside the note",
    },
    "valpool": {
        "template": "validation_pool.md.j2",
        "title": "What this artifact measured and modelled, part two: the pool size varied, and the model",
    },
    "valinputs": {
        "template": "validation_inputs.md.j2",
        "title": "What this artifact measured and modelled, part three: inputs and where they come from",
    },
    "lab": {
        "template": "lab.md.j2",
        "title": "KV caches that don't fit on the GPU: cyclic access, LRU and offloading to CPU",
    },
}


def document_figures(wildcards):
    """Every figure either document embeds, as named inputs (the note's, then the lab's)."""
    return {**FIGURES, **LAB_FIGURES}


def documents(wildcards):
    """Each document's template, title and the names of the figures it may embed."""
    figures = {
        "note": sorted(FIGURES),
        "validation": sorted(FIGURES),
        "valpool": sorted(FIGURES),
        "valinputs": [],
        "lab": sorted(LAB_FIGURES),
    }
    return {name: {**doc, "figures": figures[name]} for name, doc in DOCUMENTS.items()}
