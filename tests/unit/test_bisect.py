"""bisect's parts that need no engine (the runs on a real engine are in tests/integration/test_bisect.py):
its options checked before anything builds, the metrics it reads from what a row printed (the last of
several counts), each row's outcome, and the search for the first prefix whose outcome differs."""

from __future__ import annotations

import json

import pytest

from servebuild.check import bisect
from servebuild.errors import InputError
from servebuild.recipe.load import load_recipe
from support import REPO_ROOT


# -- bisect's options: checked before anything builds ------------------------------------------------------------------


def test_bisect_options_are_checked_before_anything_builds():
    from servebuild.check import bisect

    for metric, threshold, message in (
        ("m", "abc", "not a finite number"),
        ("m", "nan", "not a finite number"),
        ("", "1", "together"),
        ("m", None, "together"),
    ):
        with pytest.raises(InputError, match=message):
            bisect.parse_threshold(metric, threshold)
    from servebuild.check.container import RunOptions

    for probe, message in (
        (bisect.Probe("true", timeout_s=0), "positive"),
        (bisect.Probe(" "), "empty"),
        (bisect.Probe("true", run=RunOptions(volumes=("--privileged",))), "SRC:DST"),
        (bisect.Probe("true", run=RunOptions(volumes=("/tmp:/x\n",))), "line break"),
        (bisect.Probe("true", run=RunOptions(network="none;rm")), "not a docker network"),
        (bisect.Probe("true", run=RunOptions(shm_size="32 gigs")), "not a size"),
        (bisect.Probe("true", run=RunOptions(gpus="device=0")), "not all, none"),
    ):
        with pytest.raises(InputError, match=message):
            probe.check()
    script = bisect.Probe("true", metrics_file="x'; touch /pwned; '").script()
    import shlex

    assert shlex.quote("x'; touch /pwned; '") in script and "[ -f 'x'; touch" not in script


# -- bisect: the last metrics line counts; an exit status decides when there is no metric ----------------------


def test_of_several_json_lines_the_last_one_counts():
    out = 'noise\n{"ttft": 9, "run": 1}\nmore noise\n{"ttft": 3, "run": 2}\ntail\n'
    assert bisect.parse_metrics(out) == {"ttft": 3, "run": 2}


def test_of_several_metrics_files_the_last_one_counts():
    import base64

    marked = [f"{bisect.METRICS_MARK} {base64.b64encode(json.dumps({'ttft': v}).encode()).decode()}" for v in (9, 3)]
    assert bisect.parse_metrics("\n".join(["x", marked[0], '{"ttft": 1}', marked[1], "y"]) + "\n") == {"ttft": 3}


def test_of_several_cache_censuses_the_last_one_counts():
    out = (
        f'{bisect.CACHE_MARK} {{"changed": {{"a": 5}}}}\n{bisect.CACHE_MARK} {{"changed": {{"a": 1, "b": 1}}}}\n'
        '{"ttft": 3}\n'
    )
    assert bisect.parse_metrics(out) == {"ttft": 3, "jit_compiled_files": 2}


def row(exit_code, metrics=None) -> bisect.Row:
    return bisect.Row(
        variant="v", patches=[], tag="t", image_id="i", build_s=1.0, exit=exit_code, metrics=metrics or {}
    )


@pytest.mark.parametrize(
    "exit_code,metric,threshold,expected",
    [
        (0, None, None, "pass"),
        (1, None, None, "fail"),
        (137, None, None, "fail"),
        (None, None, None, "timeout"),
        (0, "tok_s", 2.0, "pass"),
        (0, "tok_s", 4.0, "fail"),
        (0, "ttft", 1.0, "no-metric"),
        (None, "tok_s", 2.0, "timeout"),
    ],
)
def test_the_outcome_without_a_metric_is_the_exit_status(exit_code, metric, threshold, expected):
    assert bisect.outcome(row(exit_code, {"tok_s": 3}), metric, threshold) == expected


@pytest.mark.parametrize(
    "value, expected", [(2.0, "pass"), (2, "pass"), (1.999, "fail"), ("2.0", "no-metric"), ([2.0], "no-metric")]
)
def test_a_metric_exactly_at_the_threshold_passes(value, expected):
    """--threshold is the least passing value; a metric that is not a number is no metric, never compared."""
    assert bisect.outcome(row(0, {"tok_s": value}), "tok_s", 2.0) == expected


@pytest.mark.parametrize("n, first", [(8, 1), (8, 5), (8, 8), (1, 1), (8, None), (3, None)])
def test_the_search_finds_the_first_prefix_whose_outcome_differs(n, first):
    """Prefixes below `first` fail, from it on they pass (None: every prefix passes): the search names
    `first`, or None when the whole stack agrees with the release, measuring each prefix at most once."""
    asked = []

    def result(i):
        asked.append(i)
        return "fail" if first is None or i < first else "pass"

    assert bisect.first_change(n, result) == first
    assert len(asked) == len(set(asked)) and asked[0] == n, asked


def test_a_row_exits_with_its_first_failing_run():
    r = bisect.Row(variant="v", patches=[], tag="t", image_id="i", build_s=1.0)
    r.add(0, 1.0, {}, "log1", None)
    assert r.exit == 0
    r.add(3, 1.0, {}, "log2", None)
    r.add(5, 1.0, {}, "log3", None)
    assert r.exit == 3
    r.add(None, 1.0, {}, "log4", None)
    assert r.exit is None


def test_search_starts_at_the_first_prefix_whose_profiles_meet_no_known_defect():
    """SGLang 0.5.16 DSpark: prefixes without the verify-pad fix are refused, so --search's baseline is the
    first prefix that carries it (the recipe puts it first); a stack with the fix later starts later."""
    loaded = load_recipe("sglang-native-fp8", REPO_ROOT)
    jobs = bisect.jobs_for(loaded, None, True)
    assert jobs[0] == ("prefix-1", ("sglang-dsv4-verify-pad",))
    assert [name for name, _ in jobs] == ["prefix-1", "prefix-2", "prefix-3", "prefix-4"]
    engine = loaded.recipe.engine
    src = engine.source
    moved = src.model_copy(update={"patches": [src.patches[1], src.patches[3], src.patches[0]]})
    recipe = loaded.recipe.model_copy(update={"engine": engine.model_copy(update={"source": moved})})
    assert [name for name, _ in bisect.jobs_for(loaded.replace(recipe), None, True)] == ["prefix-3"]
    # a recipe whose profiles meet no defect starts at the release
    assert bisect.jobs_for(load_recipe("vllm-dspark", REPO_ROOT), None, True)[0] == ("prefix-0", ())
