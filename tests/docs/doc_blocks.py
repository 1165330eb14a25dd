"""The fenced ```bash and ```python blocks of README.md and docs/*.md, cut into what a reader would run: one entry
per shell command (lines joined across trailing backslashes, ``&&`` chains split, comments stripped, a heredoc's
body kept with its command) and one per python block. tests/docs/test_docs_commands.py checks that every entry is
run, validated or listed with its reason, so a command added to the docs cannot go unchecked."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", flags=re.DOTALL | re.MULTILINE)
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


@dataclass(frozen=True)
class Block:
    """One fenced block: its file (relative to the repository root), the line of its opening fence, its language
    tag and its text."""

    file: str
    line: int
    lang: str
    text: str


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md and docs/*.md (not docs/results/: those pages record commands with their measured output)."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def blocks(root: Path = ROOT) -> list[Block]:
    out: list[Block] = []
    for path in doc_files(root):
        text = path.read_text()
        for m in FENCE.finditer(text):
            out.append(Block(str(path.relative_to(root)), text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)))
    return out


def strip_comment(line: str) -> str:
    """The line without its shell comment: a ``#`` outside quotes, at the start or after whitespace."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _split_and(line: str) -> list[str]:
    """``a && b`` -> [a, b] (outside quotes)."""
    parts, quote, start = [], "", 0
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif line.startswith("&&", i):
            parts.append(line[start:i].strip())
            start = i + 2
            i += 1
        i += 1
    parts.append(line[start:].strip())
    return [p for p in parts if p]


def shell_commands(text: str) -> list[str]:
    """The commands of a bash block, each on one line with single spaces; a heredoc's body follows its command
    after a newline, verbatim, ending with its terminator."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = strip_comment(lines[i])
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1].rstrip() + " " + strip_comment(lines[i]).strip()
        i += 1
        line = " ".join(line.split())
        if not line:
            continue
        parts = _split_and(line)
        for part in parts:
            m = HEREDOC.search(part)
            if m:  # the body, up to its terminator line
                body = []
                while i < len(lines) and lines[i].strip() != m.group(2):
                    body.append(lines[i])
                    i += 1
                i += 1
                part = "\n".join([part, *body, m.group(2)])
            out.append(part)
    return out


def doc_commands(root: Path = ROOT) -> dict[str, list[str]]:
    """Every shell command of the docs -> the places (``file:line``) where it appears."""
    out: dict[str, list[str]] = {}
    for b in blocks(root):
        if b.lang in ("bash", "sh", "shell", "console"):
            for cmd in shell_commands(b.text):
                out.setdefault(cmd, []).append(f"{b.file}:{b.line}")
    return out


def python_blocks(root: Path = ROOT) -> dict[tuple[str, str], Block]:
    """Every python block, keyed by (file, its first line of code): stable while the block is edited below it."""
    out: dict[tuple[str, str], Block] = {}
    for b in blocks(root):
        if b.lang == "python":
            first = next(x for x in b.text.splitlines() if x.strip() and not x.lstrip().startswith("#"))
            key = (b.file, strip_comment(first).strip())
            assert key not in out, f"{b.file}:{b.line}: two python blocks start with {first.strip()!r}"
            out[key] = b
    return out
