"""The Beam options the data steps choose (slipway.core.beam): parsing, user settings, thresholds, cgroup quotas."""

from __future__ import annotations

import os

import pytest

from slipway.core import beam
from slipway.core.errors import OPTION_NAMES_ENV, SlipwayError

MULTI = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


@pytest.mark.parametrize("given", [
    ["--runner=DirectRunner", "--direct_num_workers=2"],
    '["--runner=DirectRunner", "--direct_num_workers=2"]',
    "--runner=DirectRunner --direct_num_workers=2",
    ["--runner", "DirectRunner", "--direct_num_workers", "2"],
])
def test_a_list_a_json_list_and_a_shell_string_read_the_same(given):
    assert beam.parse_args(given) == ["--runner=DirectRunner", "--direct_num_workers=2"]


def test_empty_means_no_arguments():
    assert beam.parse_args(None) == beam.parse_args("") == beam.parse_args([]) == []


@pytest.mark.parametrize(("given", "error"), [
    ("--temp_location='gs://b", "beam_pipeline_args: cannot split \"--temp_location='gs://b\" into arguments"),
    ('["--runner=DirectRunner"', "beam_pipeline_args: not a valid JSON list"),
    ([3], "beam_pipeline_args[0] 3: each argument must be a string"),
    (["runner=DirectRunner"], "beam_pipeline_args[0] 'runner=DirectRunner': expected --name=value"),
    ({"runner": "DirectRunner"}, "beam_pipeline_args: expected a list of --name=value strings, got dict"),
    ("--direct_num_workers=two", "beam_pipeline_args: --direct_num_workers=two: not a whole number"),
    ("--direct_num_workers=-1", "beam_pipeline_args: --direct_num_workers=-1: must be 0 (all cores) or more"),
    ("--direct_running_mode=fast", "beam_pipeline_args: --direct_running_mode=fast: expected one of in_memory"),
])
def test_a_malformed_value_is_one_line_naming_the_input(given, error):
    with pytest.raises(SlipwayError) as caught:
        beam.choose("transform", given, 10)
    assert str(caught.value).startswith(error) and "\n" not in str(caught.value)


def test_under_the_cli_errors_name_the_flag(monkeypatch):
    monkeypatch.setenv(OPTION_NAMES_ENV, '{"beam_pipeline_args": "--beam-pipeline-args"}')
    with pytest.raises(SlipwayError, match=r"^--beam-pipeline-args: --direct_num_workers=x: not a whole number$"):
        beam.choose("evaluate", "--direct_num_workers=x", 10)


def test_every_size_runs_in_process_by_default_as_measured():
    choice = beam.choose("transform", [], 10**9, cores=16)
    assert (choice.workers, choice.mode) == (1, "in_memory")
    assert choice.reason == "faster than worker processes at every size measured"


def test_above_a_steps_row_limit_every_core_gets_a_worker_process(monkeypatch):
    limit = 100_000
    monkeypatch.setitem(beam.IN_PROCESS_MAX_ROWS, "transform", limit)
    small = beam.choose("transform", [], limit, cores=2)
    assert (small.args, small.workers, small.mode) == (
        ["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory"], 1, "in_memory")
    large = beam.choose("transform", [], limit + 1, cores=2)
    assert large.args == ["--runner=DirectRunner", *MULTI]
    assert large.describe() == (f"Beam DirectRunner multi-processing, 2 workers ({limit + 1:,} rows > {limit:,}: one "
                                "worker process per core)")
    assert large.facts() == {"runner": "DirectRunner", "workers": 2, "mode": "multi_processing",
                             "batch_size": beam.RECORD_BATCH_SIZE}
    assert beam.choose("transform", [], None, cores=2).mode == "in_memory"  # unknown size: small


def test_one_core_never_starts_worker_processes():
    choice = beam.choose("transform", [], 10**9, cores=1)
    assert (choice.workers, choice.mode, choice.reason) == (1, "in_memory", "one usable core")


def test_the_users_settings_win():
    assert beam.choose("transform", ["--direct_num_workers=1"], 10**9, cores=2).args[1:3] == [
        "--direct_num_workers=1", "--direct_running_mode=in_memory"]
    threads = beam.choose("transform", ["--direct_running_mode=multi_threading"], 10, cores=2)  # a mode: every core
    assert (threads.workers, threads.mode, threads.reason) == (2, "multi_threading", "from beam_pipeline_args")
    assert beam.choose("evaluate", ["--direct_num_workers=0"], 10, cores=2).workers == 2  # Beam's 0: every core
    kept = beam.choose("transform", ["--runner=BundleBasedDirectRunner", "--direct_num_workers=3", "--foo=bar"], 10,
                       cores=2)
    assert kept.args == ["--runner=BundleBasedDirectRunner", "--direct_num_workers=3",
                         "--direct_running_mode=multi_processing", "--foo=bar"]


def test_other_runners_get_the_arguments_untouched():
    given = ["--runner=FlinkRunner", "--flink_master=flink:8081", "--environment_type=EXTERNAL",
             "--environment_config=localhost:50000", "--direct_num_workers=4"]
    choice = beam.choose("transform", given, 10**9)
    assert choice.args == given
    assert (choice.runner, choice.workers, choice.mode) == ("FlinkRunner", None, "")
    assert choice.describe() == "Beam FlinkRunner (from beam_pipeline_args)"


@pytest.mark.parametrize(("files", "quota"), [
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3.0),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"cpu.max": "garbage\n"}, None),
    ({}, None),
])
def test_cgroup_cpu_quota(tmp_path, files, quota):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert beam.cgroup_cpu_quota(tmp_path) == quota


def test_a_quota_caps_the_cores_to_whole_ones(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # a pod's "1500m"
    assert beam.usable_cores(tmp_path) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert beam.usable_cores(tmp_path) == len(os.sched_getaffinity(0))
