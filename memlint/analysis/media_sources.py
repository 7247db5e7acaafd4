"""Whether a data set class of the project decodes media into floating-point
samples, itself or through what it calls: the project's answer to "does this
loader carry images, audio or video", asked by MEM005 for a loader whose data
set class is defined in another file. A data set's `__getitem__` often reads
through a reader class or a `read_image` helper of a file no rule walks (no
torch in it), so the answer is read from the source with Python's own
parser: only the files that define the names on the way, once per project,
only when a loader asks, whatever else was checked or selected."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from memlint.analysis.datasets import decodes_media, is_media_dataset
from memlint.analysis.files import read_regular
from memlint.analysis.project import Condition, Project, ast_dotted_name, read_tree

#: a definition of a class or function, as its file's bytes show it once its
#: line holds nothing before it but indentation and `async` (an anchor at each
#: line's start costs the regex engine twice as much on a large project)
_DEFINITION = re.compile(rb"(?:def|class)[ \t]+(\w+)")
#: how far and how wide the search follows calls (a data set, its reader, a helper),
#: and how many definitions a name may have to be followed: a reader class or a
#: `read_image` helper is defined once or twice; `forward`, `get` or `__init__`
#: in most files of a large project, which would mean parsing all of them
_DEPTH, _NAMES, _DEFINED_AT_MOST, _FILES = 4, 64, 2, 24


@dataclass(frozen=True)
class PreviewUnlessMediaClass(Condition):
    """A loader of a data set built from a class of another file: the rule's
    own finding where the project defines that class decoding media into
    floating-point samples, itself or through what it calls, else a preview
    variant (its batches may be ids)."""

    class_name: str

    def drops(self, project: Project) -> bool:
        return False

    def previews(self, project: Project) -> bool:
        return not MediaSources.of(project).decodes(self.class_name)


class _Definition:
    """One class or function as written: whether it decodes media itself, and
    the names it calls (their last part: `read_image`, `VOCBboxDataset`)."""

    def __init__(self, node: ast.AST, imported: dict[str, str]) -> None:
        self.decodes, self.calls = False, set()
        bases = node.bases if isinstance(node, ast.ClassDef) else []
        for base in bases:
            self.decodes |= is_media_dataset(_qualified(ast_dotted_name(base), imported))
        for inner in ast.walk(node):
            written = ast_dotted_name(inner.func) if isinstance(inner, ast.Call) else None
            if written is not None:
                self.calls.add(written.rpartition(".")[2])
                self.decodes |= decodes_media(_qualified(written, imported))


_readings: WeakKeyDictionary[Project, MediaSources] = WeakKeyDictionary()


class MediaSources:
    """The project's definitions, read by name as a question needs them."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._defined_in: dict[str, list[str]] | None = None
        self._files: dict[str, dict[str, list[_Definition]]] = {}
        self._verdicts: dict[str, bool] = {}

    @classmethod
    def of(cls, project: Project) -> MediaSources:
        reading = _readings.get(project)
        if reading is None:
            reading = _readings[project] = cls(project)
        return reading

    def decodes(self, class_name: str) -> bool:
        """Whether `class_name` (or what it calls, a few steps on) decodes media."""
        verdict = self._verdicts.get(class_name)
        if verdict is None:
            verdict = self._verdicts[class_name] = self._search(class_name)
        return verdict

    def _search(self, start: str) -> bool:
        if any(start in facts.media_classes for facts in self.project.modules):
            return True  # the walk of its own file said so
        seen, frontier = {start}, [start]
        for _ in range(_DEPTH):
            following: list[str] = []
            for name in frontier:
                for definition in self._definitions(name):
                    if definition.decodes:
                        return True
                    for called in definition.calls - seen:
                        if len(seen) < _NAMES:
                            seen.add(called)
                            following.append(called)
            frontier = following
        return False

    def _definitions(self, name: str) -> list[_Definition]:
        """The definitions of `name` in the project, none for a name defined in
        more than `_DEFINED_AT_MOST` files or once `_FILES` files were read."""
        if self._defined_in is None:
            self._defined_in = {}
            for facts in self.project.modules:
                if facts.path.endswith(".ipynb"):
                    continue
                try:
                    data = read_regular(facts.path)
                except OSError:
                    continue
                for match in _DEFINITION.finditer(data):
                    if _starts_its_line(data, match.start()):
                        self._defined_in.setdefault(match.group(1).decode(), []).append(facts.path)
        paths = self._defined_in.get(name, ())
        if len(paths) > _DEFINED_AT_MOST or len(self._files) + len(paths) > _FILES:
            return []
        return [definition for path in paths for definition in self._read(path).get(name, ())]

    def _read(self, path: str) -> dict[str, list[_Definition]]:
        found = self._files.get(path)
        if found is None:
            found = self._files[path] = {}
            read = read_tree(path)
            if read is not None:
                imported = _imports(read[1])
                for node in ast.walk(read[1]):
                    if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                        found.setdefault(node.name, []).append(_Definition(node, imported))
        return found


def _starts_its_line(data: bytes, start: int) -> bool:
    """`def`/`class` at `start` has only indentation or `async` before it on its line."""
    before = data[data.rfind(b"\n", 0, start) + 1:start].strip(b" \t")
    return before in (b"", b"async")


def _qualified(written: str | None, imported: dict[str, str]) -> str | None:
    """`Image.open` as the file imports it: `PIL.Image.open`."""
    if written is None:
        return None
    head, dot, rest = written.partition(".")
    return imported.get(head, head) + dot + rest


def _imports(tree: ast.Module) -> dict[str, str]:
    """What each imported name stands for: `Image` -> `PIL.Image`, `cv` -> `cv2`."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found[alias.asname] = alias.name
                else:
                    head = alias.name.partition(".")[0]
                    found[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found
