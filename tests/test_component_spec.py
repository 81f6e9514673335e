"""The component specs are the one place a component's interface is written: a parameter added to a spec reaches the
compiled YAML, `slipway run`'s flags, the run's plan and the executor, with no other file changed."""

from __future__ import annotations

import argparse
import importlib.util
import sys

import pytest
import yaml

from slipway.commands import run as run_command
from slipway.components import COMPONENTS
from slipway.core.component_spec import Param, Run, arguments_of, component_source, with_fields
from slipway.pipelines import settings

SCRATCH = Param("scratch_limit", int, "A parameter this test adds to a scratch copy of the spec.", default=7,
                run=Run("--scratch-limit", "the scratch parameter's flag"))


def _specs_with_scratch(component: str = "resolve_baseline"):
    specs = settings.component_specs()
    return tuple(with_fields(spec, SCRATCH) if spec.name == component else spec for spec in specs)


def _scratch_component(tmp_path, spec):
    """The component.py written from the scratch spec, imported from its own file (kfp reads the function's source)."""
    path = tmp_path / f"scratch_{spec.name}.py"
    path.write_text(component_source(spec))
    module_spec = importlib.util.spec_from_file_location(f"scratch_{spec.name}", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    return getattr(module, spec.name)


def test_a_parameter_added_to_a_spec_reaches_the_compiled_yaml(tmp_path):
    from kfp import compiler

    spec = next(s for s in _specs_with_scratch() if s.name == "resolve_baseline")
    compiler.Compiler().compile(_scratch_component(tmp_path, spec), str(tmp_path / "component.yaml"))
    compiled = yaml.safe_load((tmp_path / "component.yaml").read_text())
    inputs = compiled["root"]["inputDefinitions"]["parameters"]
    assert inputs["scratch_limit"]["parameterType"] == "NUMBER_INTEGER"
    assert inputs["scratch_limit"]["defaultValue"] == 7
    assert inputs["scratch_limit"]["description"] == SCRATCH.description
    assert inputs["scratch_limit"]["isOptional"] is True
    source = next(iter(compiled["deploymentSpec"]["executors"].values()))["container"]["command"][-1]
    assert "scratch_limit: int = 7," in source


def test_a_parameter_added_to_a_spec_reaches_the_flag_and_the_plan(tmp_path, monkeypatch):
    from slipway.commands import run_request

    specs = _specs_with_scratch()
    rows = settings.rows(specs)
    row = next(r for r in rows if r.name == "scratch_limit")
    assert row.takers == (("resolve_baseline", "scratch_limit"),)
    # every pipeline that composes resolve_baseline (all but the monitoring one, whose baseline is what served)
    assert row.defaults == {key: 7 for key, steps in settings.COMPOSED.items() if "resolve_baseline" in steps}
    assert settings.MONITORING not in row.defaults
    monkeypatch.setattr(settings, "PARAMETERS", rows)
    monkeypatch.setattr(settings, "component_specs", lambda: specs)
    parser = argparse.ArgumentParser()
    run_command.add_parser(parser.add_subparsers(dest="command"))
    help_text = parser._subparsers._group_actions[0].choices["run"].format_help()
    assert "--scratch-limit SCRATCH_LIMIT" in help_text and "the scratch parameter's flag" in help_text
    workdir = ["--workdir", str(tmp_path / "workdir")]
    given = parser.parse_args(["run", "--scratch-limit", "9", *workdir])
    assert given.scratch_limit == 9
    assert run_request.plan(given).arguments["scratch_limit"] == 9
    assert run_request.plan(parser.parse_args(["run", *workdir])).arguments["scratch_limit"] == 7  # the default
    assert not (tmp_path / "workdir").exists()  # plan writes nothing


def test_a_parameter_added_to_a_spec_reaches_the_executor(tmp_path, monkeypatch):
    """The step hands the executor every spec parameter by name: the scratch one arrives without step.py naming it,
    and the lineage execution records it."""
    from slipway.components.resolve_baseline import executor, step
    from slipway.core import lineage

    spec = next(s for s in _specs_with_scratch() if s.name == "resolve_baseline")
    received = {}
    real_run = executor.run

    def recording_run(**kwargs):
        received.update(kwargs)
        kwargs.pop("scratch_limit")  # the real executor has not learnt it: that is the second file's change
        return real_run(**kwargs)

    monkeypatch.setattr(step, "SPEC", spec)
    monkeypatch.setattr(executor, "run", recording_run)
    store = lineage.sqlite_uri(tmp_path / "metadata.sqlite")
    monkeypatch.setenv(lineage.ENV_RUN_ID, "scratch-run")
    uri, reason = step.run({"pipeline_name": "p", "baseline_model": "none", "model_registry": "", "model_name": "",
                            "lineage_store": store, "scratch_limit": 9})
    assert received["scratch_limit"] == 9 and received["baseline_model"] == "none"
    assert (uri, reason) == ("", "no baseline requested: change thresholds are skipped")
    (recorded,) = lineage.open_store(store).run_steps("scratch-run")
    assert recorded.params["scratch_limit"] == 9


def test_the_typed_arguments_refuse_a_name_the_spec_does_not_declare():
    spec = settings.component_specs()[COMPONENTS.index("resolve_baseline")]
    values = {"pipeline_name": "p", "baseline_model": "auto", "model_registry": "", "model_name": "",
              "lineage_store": ""}
    typed = arguments_of(spec, values)
    assert typed.executor_parameters() == {k: v for k, v in values.items() if k != "lineage_store"}  # the step's
    assert typed.recorded() == values  # resolve_baseline records which store it read (the others do not)
    assert typed.pipeline_name == "p" and type(typed).__name__ == "ResolveBaselineArguments"
    with pytest.raises(TypeError, match="unexpected keyword argument 'surprise'"):
        arguments_of(spec, {**values, "surprise": 1})
    with pytest.raises(TypeError, match="pipeline_name"):
        arguments_of(spec, {k: v for k, v in values.items() if k != "pipeline_name"})


def test_typed_arguments_of_a_spec_with_a_list_default():
    """transform's beam_pipeline_args defaults to []: the spec still makes its dataclass (it is no dict key)."""
    spec = settings.component_specs()[COMPONENTS.index("transform")]
    typed = arguments_of(spec, {"examples": "e", "schema": "s", "module_file": "m.py", "transform_graph": "g",
                                "transformed_examples": "t", "beam_pipeline_args": ["--direct_num_workers=2"],
                                "lineage_store": "sqlite:///x"})
    assert typed.executor_parameters() == {"module_file": "m.py", "beam_pipeline_args": ["--direct_num_workers=2"]}
    assert typed.recorded() == typed.executor_parameters()


def test_a_pipeline_parameter_is_declared_once():
    specs = _specs_with_scratch()
    twice = tuple(with_fields(s, SCRATCH) if s.name == "deploy" else s for s in specs)
    with pytest.raises(TypeError, match="pipeline parameter scratch_limit: declared twice"):
        settings.rows(twice)
    named_only = tuple(with_fields(s, Param("orphan", str, "x", default="", run="nowhere")) if s.name == "deploy"
                       else s for s in settings.component_specs())
    with pytest.raises(TypeError, match=r"\['nowhere'\] are named by a spec but declared by none"):
        settings.rows(named_only)


def test_every_component_py_and_readme_table_is_written_from_its_spec():
    """component.py, and the README's interface table, hold exactly what the spec makes (slipway compile writes
    them; --check refuses a stale one)."""
    from pathlib import Path

    from slipway.core.component_spec import interface_markdown

    root = Path(__file__).resolve().parent.parent
    for spec in settings.component_specs():
        folder = root / "components" / spec.name
        assert (folder / "component.py").read_text() == component_source(spec), spec.name
        table = interface_markdown(spec)
        assert table in (folder / "README.md").read_text(), spec.name
        rows = [line for line in table.splitlines() if line.startswith("| `") or line.startswith("| return")]
        assert len(rows) == len(spec.fields) + len(spec.returns)


def test_a_readme_without_an_interface_section_is_refused():
    from slipway.core.component_spec import with_interface

    spec = settings.component_specs()[0]
    with pytest.raises(ValueError, match="components/ingest/README.md: no <!-- interface"):
        with_interface("# ingest\n\nno table here\n", spec)


def _with_optional_baseline():
    """evaluate's spec with its baseline given as an optional Model artifact (with_fields puts it last, after the
    defaulted parameters: it counts as defaulted)."""
    from slipway.core.component_spec import In

    spec = settings.component_specs()[COMPONENTS.index("evaluate")]
    return with_fields(spec, In("baseline", "Model", "A model to compare against; left out: none.", optional=True))


def test_an_optional_input_is_written_with_a_none_default_and_marked_in_the_readme():
    from slipway.core.component_spec import interface_markdown

    spec = _with_optional_baseline()
    source = component_source(spec)
    assert "    baseline: Input[Model] = None,\n" in source
    assert "    examples: Input[Dataset],\n" in source  # a required input keeps no default
    assert source.index("lineage_store: str") < source.index("baseline: Input[Model]")  # with the defaulted ones
    assert "        baseline: A model to compare against; left out: none.\n" in source  # the docstring as ever
    assert "| `baseline` | input Model (optional) |  |  |" in interface_markdown(spec)
    assert "| `examples` | input Dataset |  |  |" in interface_markdown(spec)
    values = {f.name: f"{f.name}-value" for f in spec.fields} | {"baseline": None}  # kfp's absent artifact
    assert arguments_of(spec, values).baseline is None


def test_a_required_field_after_a_defaulted_one_and_an_optional_output_are_refused():
    from slipway.core.component_spec import Artifact, ComponentSpec, In, Out

    with pytest.raises(ValueError, match="examples \\(no default\\) follows model \\(which has one\\)"):
        ComponentSpec("scratch", "Scratch.", (In("model", "Model", "m", optional=True), In("examples", "Dataset", "e")))
    with pytest.raises(ValueError, match="out \\(no default\\) follows limit"):
        ComponentSpec("scratch", "Scratch.", (Param("limit", int, "l", default=1), Out("out", "Model", "o")))
    with pytest.raises(ValueError, match="artifact report: an output cannot be optional"):
        Artifact("report", "HTML", "r", output=True, optional=True)


def test_an_optional_input_compiles_as_optional(tmp_path):
    """kfp itself reads the generated `Input[Model] = None` as an optional artifact input."""
    from kfp import compiler

    spec = _with_optional_baseline()
    compiler.Compiler().compile(_scratch_component(tmp_path, spec), str(tmp_path / "component.yaml"))
    artifacts = yaml.safe_load((tmp_path / "component.yaml").read_text())["root"]["inputDefinitions"]["artifacts"]
    assert artifacts["baseline"]["isOptional"] is True
    assert artifacts["baseline"]["artifactType"]["schemaTitle"] == "system.Model"
    assert "isOptional" not in artifacts["examples"]
