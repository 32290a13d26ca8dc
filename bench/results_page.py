"""Results pages: each bench script writes what it measured into its own page, docs/results/<page>.md.

A page is a title, a line saying which script writes it, and sections. Each section lies between
two snippet markers (`<!-- --8<-- [start:NAME] -->` ... `[end:NAME]`), so a family's or a
command's page can show it with `--8<-- "docs/results/PAGE.md:NAME"` (pymdownx.snippets, see
mkdocs.yml), and starts with a stamp: when, on which machine, at which commit and by which command
it was measured. Writing a section replaces that section alone and keeps the page's others (a
bench run with other options, or the measurements moved here from the README with their own
provenance): a new measurement is a rerun, not an edit.

    from results_page import write_section
    write_section("inference", "minilm", "all-MiniLM-L6-v2 against transformers", table_markdown)
"""

import datetime
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"


def machine() -> str:
    """The processor, its usable cores, the GPU if any, and the versions that set the speed."""
    cpu = platform.processor() or platform.machine()
    try:
        names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), flags=re.M)
        cpu = names[0].strip() if names else cpu
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parts = [f"{cpu} ({cores} cores)"]
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
        parts += [gpu, f"torch {torch.__version__}"]
    except ImportError:
        pass
    parts.append(f"Python {platform.python_version()}")
    return ", ".join(parts)


def commit() -> str:
    """The checkout's commit, marked when the working tree differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else "")


def stamp(command: str | None = None) -> str:
    """One italic line: date and time (UTC), machine, commit and the command that measured."""
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = command or shlex.join(["python", os.path.relpath(sys.argv[0], REPO), *sys.argv[1:]])
    return f"*Measured {when} on {machine()}; commit {commit()}; `{command}`.*"


def _markers(name: str) -> tuple[str, str]:
    if not re.fullmatch(r"[a-z][-_0-9a-z]*", name):
        raise ValueError(f"section name {name!r}: lower-case letters, digits, - and _, starting with a letter")
    return f"<!-- --8<-- [start:{name}] -->", f"<!-- --8<-- [end:{name}] -->"


def write_section(page: str, name: str, title: str, body: str, *, script: str | None = None,
                  provenance: str | None = None, directory: Path | None = None) -> Path:
    """Write section `name` of docs/results/`page`.md (or `directory`/`page`.md): `### title`, the
    stamp (or `provenance`, for figures measured before this page existed), then `body` (Markdown:
    a table and its notes). The page's other sections stay as they are; a missing page is created.
    Returns its path."""
    path = (directory or RESULTS) / f"{page}.md"
    script = script or os.path.relpath(sys.argv[0], REPO)
    if not name[:1].isalpha():
        name = "s-" + name  # a snippet section's name starts with a letter
    start, end = _markers(name)
    section = f"{start}\n### {title}\n\n{provenance or stamp()}\n\n{body.strip()}\n{end}\n"
    if path.exists():
        text = path.read_text(encoding="utf-8")
    else:
        text = f"# {page}\n\nWritten by `{script}`: each section is replaced when the script that measures it runs again.\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end) + r"\n?", flags=re.S)
    text = pattern.sub(lambda _: section, text, count=1) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)  # atomic: a page is never half-written
    print(f"wrote {os.path.relpath(path, REPO)} (section {name})", flush=True)
    return path


def slug(*parts: object) -> str:
    """A section name from a run's settings: `slug("preset", "base", "bf16")` -> "preset-base-bf16"."""
    text = "-".join(str(part) for part in parts if part not in (None, "")).lower()
    return re.sub(r"[^0-9a-z]+", "-", text).strip("-") or "run"


def markdown_table(header: list[str], rows: list[list[object]], align: str | None = None) -> str:
    """A Markdown table; `align` gives one character per column, 'l' or 'r' (default: first left, rest right)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = [header, rule, *[[str(cell) for cell in row] for row in rows]]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)
