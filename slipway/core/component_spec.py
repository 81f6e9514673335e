"""A component's interface as data, written once in components/<name>/spec.py (TFX's ComponentSpec, typed): its
inputs, outputs and parameters in the order of its KFP signature, each with its type, default and description, how a
pipeline and `slipway run` give a parameter (Run), and two hooks: preflight (what `slipway run` checks before any
step runs) and summary (what summary.json takes from the step's recorded outputs).

Everything else is made from it: the component.py file (component_source; kfp embeds that function's source in the
compiled YAML, so the file is written out by `slipway compile`, never filled in at import time), the step's typed
arguments (arguments(): a dataclass, whose executor_parameters() become the executor's keyword arguments), the
pipelines' parameter rows (pipelines/settings.py), `slipway run`'s flags and their help, and the runner's summary.

A description is kept line for line as written (kfp carries a docstring's line breaks into the compiled YAML and
the KFP UI shows them); a line longer than the docstring allows is wrapped at the width.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REQUIRED = inspect.Parameter.empty  # a parameter without a default
WIDTH = 120  # ruff's line length: the generated component.py is ruff-clean
# kfp.dsl's artifact classes a component's inputs and outputs may name (their spelling in the signature).
ARTIFACT_TYPES = ("Artifact", "ClassificationMetrics", "Dataset", "HTML", "Markdown", "Metrics", "Model")
SCALAR_TYPES = {str: "str", int: "int", float: "float", bool: "bool", list: "list", dict: "dict"}


@dataclass(frozen=True)
class Run:
    """How the pipelines and `slipway run` give a component parameter: the pipeline parameter it is filled from
    (name: the component parameter's own name when empty), its `slipway run` flag (empty: none) and the flag's help,
    and what the pipelines' KFP UI shows beside it (description: the component's description when empty). Several
    components may take one pipeline parameter: one declares it with a Run, the others name it (Param.run = its
    name)."""

    flag: str = ""
    help: str = ""
    name: str = ""
    description: str = ""
    choices: tuple[str, ...] = ()
    metavar: str = ""
    default: Any = REQUIRED  # the pipelines' default when it is not the component's


@dataclass(frozen=True)
class Param:
    """A parameter (a value, not an artifact). recorded: kept in the lineage execution's parameters (False for
    where a step runs rather than what it computes). executor: handed to executor.run as a keyword argument (False:
    the step uses it itself, e.g. lineage_store)."""

    name: str
    type: type
    description: str
    default: Any = REQUIRED
    run: Run | str | None = None
    recorded: bool = True
    executor: bool = True


@dataclass(frozen=True)
class Artifact:
    """An input (Input[type]) or output (Output[type]) artifact; lineage_type: the type ML Metadata records.
    optional: an input a pipeline may leave out (`Input[type] = None`: the step receives None)."""

    name: str
    type: str
    description: str
    output: bool = False
    lineage_type: str = ""
    optional: bool = False

    def __post_init__(self) -> None:
        if self.type not in ARTIFACT_TYPES:
            raise ValueError(f"artifact {self.name}: type {self.type!r} is not one of {', '.join(ARTIFACT_TYPES)}")
        if self.optional and self.output:
            # kfp always makes an output artifact for a task: there is no output a step may leave out
            raise ValueError(f"artifact {self.name}: an output cannot be optional (only an input can)")


def In(name: str, type: str, description: str, lineage_type: str = "",  # noqa: N802, A002
       optional: bool = False) -> Artifact:
    """An input artifact (optional: a pipeline may leave it out, and the step then receives None)."""
    return Artifact(name, type, description, False, lineage_type, optional)


def Out(name: str, type: str, description: str, lineage_type: str = "") -> Artifact:  # noqa: N802, A002
    """An output artifact."""
    return Artifact(name, type, description, True, lineage_type)


@dataclass(frozen=True)
class Returns:
    """A value the component returns (kfp: a single `Output`, or a NamedTuple's fields)."""

    name: str
    type: type
    description: str


Field = Param | Artifact


@dataclass(frozen=True, eq=False)  # compared and hashed as itself: its defaults may be lists
class ComponentSpec:
    """One component's interface (see the module docstring). doc: the docstring before `Args:` (paragraphs apart by
    a blank line). preflight(arguments): checks (and may complete) `slipway run`'s pipeline arguments before any
    step runs (a RunArguments). summary(outputs): summary.json's entries from this step's recorded outputs."""

    name: str
    doc: str
    fields: tuple[Field, ...]
    returns: tuple[Returns, ...] = ()
    preflight: Callable[[Any], None] | None = None
    summary: Callable[[Any], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"component {self.name}: {', '.join(repeated)} declared twice")
        # the fields are the Python signature's order, where a parameter without a default after one with a
        # default is a SyntaxError in the generated component.py: refused here, naming both
        defaulted = next((f for f in self.fields if _has_default(f)), None)
        later = self.fields[self.fields.index(defaulted) + 1:] if defaulted else ()
        required = next((f for f in later if not _has_default(f)), None)
        if required is not None:
            raise ValueError(f"component {self.name}: {required.name} (no default) follows {defaulted.name} (which "
                             f"has one); put the fields without a default first")

    @property
    def parameters(self) -> tuple[Param, ...]:
        return tuple(f for f in self.fields if isinstance(f, Param))

    @property
    def outputs(self) -> tuple[Artifact, ...]:
        return tuple(f for f in self.fields if isinstance(f, Artifact) and f.output)


def with_fields(spec: ComponentSpec, *fields: Field) -> ComponentSpec:
    """The spec with these fields added before its defaulted ones (a parameter with a default goes last)."""
    required = [f for f in spec.fields if not _has_default(f)]
    rest = [f for f in spec.fields if _has_default(f)]
    added = sorted(fields, key=_has_default)
    new = required + [f for f in added if not _has_default(f)] + rest + [f for f in added if _has_default(f)]
    return dataclasses.replace(spec, fields=tuple(new))


def _has_default(f: Field) -> bool:
    """Whether the signature gives the field a default: a parameter's own, or an optional input's None."""
    if isinstance(f, Artifact):
        return f.optional
    return f.default is not REQUIRED


# The component.py file ---------------------------------------------------------------------------------------------

HEADER = '''"""The KFP interface of {name}, written by `slipway compile` from spec.py (change that, then compile):
its body hands the arguments to step.py."""
'''
BODY = '''    arguments = dict(locals())  # the parameters, before anything else is bound
    from slipway.components.{name} import step

    return step.run(arguments)
'''
MUTABLE_DEFAULT = "  # noqa: B006  (kfp writes the default into the spec; nothing mutates it)"


def component_source(spec: ComponentSpec) -> str:
    """The text of components/<name>/component.py for this spec."""
    names = {f.type for f in spec.fields if isinstance(f, Artifact)}
    names |= {"Output" if f.output else "Input" for f in spec.fields if isinstance(f, Artifact)}
    kinds = sorted(names, key=lambda name: (not name.isupper(), name))  # isort's order: constants first
    lines = [HEADER.format(name=spec.name)]
    if len(spec.returns) > 1:
        lines.append("from typing import NamedTuple\n")
    lines.append("from kfp import dsl")
    if kinds:
        lines.append(f"from kfp.dsl import {', '.join(kinds)}")
    lines += ["", "from slipway.core.images import RUNTIME_IMAGE", "", ""]
    lines.append("@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)")
    lines.append(f"def {spec.name}(")
    lines += [f"    {_signature_entry(f)}" for f in spec.fields]
    lines.append(f"){_return_annotation(spec)}:")
    return "\n".join(lines) + "\n" + docstring(spec) + BODY.format(name=spec.name)


def _signature_entry(f: Field) -> str:
    if isinstance(f, Artifact):
        return f"{f.name}: {'Output' if f.output else 'Input'}[{f.type}]{' = None' if f.optional else ''},"
    entry = f"{f.name}: {SCALAR_TYPES[f.type]}"
    if f.default is REQUIRED:
        return entry + ","
    mutable = isinstance(f.default, list | dict)
    return f"{entry} = {_literal(f.default)},{MUTABLE_DEFAULT if mutable else ''}"


def _literal(value: Any) -> str:
    """A default as the source writes it: strings in double quotes unless they hold one."""
    if isinstance(value, str) and '"' not in value:
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def _return_annotation(spec: ComponentSpec) -> str:
    if not spec.returns:
        return ""
    if len(spec.returns) == 1:
        return f" -> {SCALAR_TYPES[spec.returns[0].type]}"
    fields = ", ".join(f"{r.name}={SCALAR_TYPES[r.type]}" for r in spec.returns)
    # Wrapped under its opening parenthesis in as few lines as ruff's width allows (the function's size counts
    # them); the caller writes the leading ")" and the trailing ":".
    lines = textwrap.wrap(f'NamedTuple("Outputs", {fields})', WIDTH - 1, initial_indent=") -> ",
                          subsequent_indent=" " * len(") -> NamedTuple("), break_long_words=False,
                          break_on_hyphens=False)
    return "\n".join(lines)[1:]


def docstring(spec: ComponentSpec) -> str:
    """The component function's docstring: doc, then `Args:` (inputs and parameters) and `Returns:` (the returned
    value or values, then the outputs), each entry's description line for line (kfp reads them into the YAML)."""
    paragraphs = spec.doc.strip().split("\n\n")
    lines = _wrapped(paragraphs[0], '    """', "    ")
    for paragraph in paragraphs[1:]:
        lines += [""] + _wrapped(paragraph, "    ", "    ")
    lines += ["", "    Args:"]
    for f in spec.fields:
        if not (isinstance(f, Artifact) and f.output):
            lines += _wrapped(f.description, f"        {f.name}: ", " " * 12)
    # kfp's single return value is "Output", named first; a NamedTuple's fields follow the output artifacts
    values = [(("Output" if len(spec.returns) == 1 else r.name), r.description) for r in spec.returns]
    outputs = [(f.name, f.description) for f in spec.outputs]
    returned = values + outputs if len(spec.returns) == 1 else outputs + values
    if returned:
        lines += ["", "    Returns:"]
        for name, description in returned:
            lines += _wrapped(description, f"        {name}: ", " " * 12)
    return "\n".join(lines + ['    """', ""])


def _wrapped(text: str, first: str, rest: str) -> list[str]:
    """The text's own lines, each wrapped at WIDTH when longer (the first after `first`, the others after `rest`)."""
    lines: list[str] = []
    for number, line in enumerate(text.split("\n")):
        lead = first if number == 0 else rest
        lines += textwrap.wrap(line, WIDTH, initial_indent=lead, subsequent_indent=rest, break_long_words=False,
                               break_on_hyphens=False) or [lead.rstrip()]
    return lines


# The step's typed arguments ----------------------------------------------------------------------------------------

def arguments_of(spec: ComponentSpec, values: dict[str, Any]) -> Any:
    """The component's arguments (its KFP body's locals) as the spec's typed dataclass: one attribute per input,
    output and parameter (an optional input left out is None, as kfp passes it). A name the spec does not declare,
    or one it declares that is missing, is a TypeError."""
    return _arguments_class(spec)(**values)


@functools.cache
def _arguments_class(spec: ComponentSpec) -> type:
    annotations = [(f.name, f.type if isinstance(f, Param) else Any) for f in spec.fields]
    namespace = {"spec": spec, "executor_parameters": _executor_parameters, "recorded": _recorded}
    title = "".join(part.title() for part in spec.name.split("_"))
    return dataclasses.make_dataclass(f"{title}Arguments", annotations, frozen=True, namespace=namespace)


def _executor_parameters(self) -> dict[str, Any]:
    """The parameters the executor takes, by name (its keyword arguments)."""
    return {p.name: getattr(self, p.name) for p in self.spec.parameters if p.executor}


def _recorded(self) -> dict[str, Any]:
    """The parameters the lineage execution records."""
    return {p.name: getattr(self, p.name) for p in self.spec.parameters if p.recorded}


# `slipway run`'s arguments, as the preflight hooks see them ----------------------------------------------------------

@dataclass
class RunArguments:
    """The pipeline arguments `slipway run` made from its flags, while each component's preflight hook checks (and
    may complete) them before any step runs; a hook raises a SlipwayError naming the flag (flag())."""

    values: dict[str, Any]  # pipeline parameter -> value: what the run passes (a hook may rewrite a value)
    given: dict[str, Any]  # pipeline parameter -> what its flag gave (None: not given), taken by the pipeline or not
    flags: dict[str, str]  # pipeline parameter -> its flag
    runner: str = "subprocess"  # how the steps run: subprocess or podman
    workdir: Any = None  # the run's workdir (a Path), not created yet

    def flag(self, name: str) -> str:
        """The flag an error names for this parameter."""
        return self.flags.get(name, name)

    def takes(self, name: str) -> bool:
        """Whether the pipeline that runs takes this parameter."""
        return name in self.values

    def check_text_file(self, name: str, what: str) -> None:
        """A file read whole before the run (the module, the search spec) is under TEXT_FILE_LIMIT, one line if
        not."""
        check_text_file(Path(self.values[name]), what, self.flag(name))

    def local_file(self, name: str) -> str:
        """A parameter naming a file, as an absolute path (a URI is resolved to its local path first)."""
        from slipway.core.storage import local_path

        return str(Path(local_path(self.values[name], self.flag(name))).resolve())


# Most bytes a file the CLI reads whole before the run may have (a module file, a search spec): source text is a
# few KB; anything this big is a wrong path (a data file given as --module), refused before it is read.
TEXT_FILE_LIMIT = 4 * 2**20


def check_text_file(path: Path, what: str, flag: str) -> None:
    """A file read whole before the run (the module, the search spec) is under TEXT_FILE_LIMIT, one line if not."""
    from slipway.core.errors import SlipwayError

    size = path.stat().st_size
    if size > TEXT_FILE_LIMIT:
        raise SlipwayError(f"{what} {path}: {size / 2**20:.1f} MiB is no source text ({flag} takes a Python or "
                           f"YAML file of a few KB; was a data file given?)")


# The README's interface table ---------------------------------------------------------------------------------------

README_BEGIN = "<!-- interface: written by `slipway compile` from spec.py -->"
README_END = "<!-- /interface -->"


def interface_markdown(spec: ComponentSpec) -> str:
    """The component's KFP interface as a Markdown table for its README (between README_BEGIN and README_END)."""
    lines = [README_BEGIN, "| name | kind | default | pipeline parameter (`slipway run` flag) | what |",
             "|---|---|---|---|---|"]
    for f in spec.fields:
        if isinstance(f, Artifact):
            kind = f"{'output' if f.output else 'input'} {f.type}{' (optional)' if f.optional else ''}"
            default, run = "", ""
        else:
            kind = SCALAR_TYPES[f.type]
            default = "" if f.default is REQUIRED else f"`{_literal(f.default)}`"
            run = _run_cell(f)
        lines.append(f"| `{f.name}` | {kind} | {default} | {run} | {_cell(f.description)} |")
    for r in spec.returns:
        name = "return value" if len(spec.returns) == 1 else f"`{r.name}`"
        lines.append(f"| {name} | returns {SCALAR_TYPES[r.type]} |  |  | {_cell(r.description)} |")
    return "\n".join(lines + [README_END])


def _run_cell(param: Param) -> str:
    if param.run is None:
        return ""
    if isinstance(param.run, str):
        return f"`{param.run}`"
    name = param.run.name or param.name
    return f"`{name}` (`{param.run.flag}`)" if param.run.flag else f"`{name}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def with_interface(readme: str, spec: ComponentSpec) -> str:
    """The README with its interface table rewritten from the spec (ValueError: it has no place for one)."""
    begin, end = readme.find(README_BEGIN), readme.find(README_END)
    if begin < 0 or end < begin:
        raise ValueError(f"components/{spec.name}/README.md: no {README_BEGIN} ... {README_END} section")
    return readme[:begin] + interface_markdown(spec) + readme[end + len(README_END):]
