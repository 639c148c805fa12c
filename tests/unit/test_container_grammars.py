"""One grammar per container option (issue 33): `invoke warm` and `invoke bisect` read GPU selections
(check/container.check_gpus), networks (check_network) and volumes (check_volume) with one parser each;
warm alone refuses `auto` GPUs (it needs its GPUs, it does not probe for them)."""

from __future__ import annotations

import pytest

from servebuild.check.container import RunOptions, check_gpus, check_network
from servebuild.cli.warm import WarmArgs, checked_request
from servebuild.errors import InputError

UUID = "GPU-8e5c1a2b-0c3d-4e5f-9a8b-7c6d5e4f3a2b"


def warm(gpus):
    return checked_request(WarmArgs(image="img", run="true", gpus=gpus)).gpus


def warm_network(network):
    return checked_request(WarmArgs(image="img", run="true", network=network)).network


def bisect_network(network):
    return RunOptions(network=network).check().network


@pytest.mark.parametrize("value", ["all", "none", "0", "0,1", "3,2,1", UUID, f"{UUID},{UUID[:-1]}c"])
def test_both_commands_take_the_same_selections(value):
    assert warm(value) == check_gpus(value) == value


@pytest.mark.parametrize("value", ["0;1", "all,0", "0,0", f"{UUID},{UUID}", "device=0", " 0", "0,", "1234"])
def test_both_commands_refuse_the_same_selections_in_one_line(value):
    for parse in (warm, check_gpus):
        with pytest.raises(InputError) as err:
            parse(value)
        assert err.value.field == "--gpus" and "\n" not in str(err.value)
        assert "is not all, none" in str(err.value) or "names a GPU twice" in str(err.value)


def test_auto_is_bisects_alone():
    assert check_gpus("auto") == "auto"
    with pytest.raises(InputError, match="is not all, none or a GPU list"):
        warm("auto")


@pytest.mark.parametrize("value", ["none", "host", "bridge", "my-net_1.x"])
def test_both_commands_take_the_same_networks(value):
    assert warm_network(value) == bisect_network(value) == check_network(value) == value


@pytest.mark.parametrize("value", ["host;rm", "-net", "", "a" * 65, "net\n"])
def test_both_commands_refuse_a_network_with_one_line(value):
    lines = set()
    for parse in (bisect_network, check_network) + ((warm_network,) if value else ()):  # warm's default is none
        with pytest.raises(InputError) as err:
            parse(value)
        assert err.value.field == "--network" and "\n" not in str(err.value)
        lines.add(str(err.value))
    assert len(lines) == 1 and "is not a docker network name" in lines.pop()
