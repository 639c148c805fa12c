"""A failed build's one line (build/docker.py failure_cause): the failed tool's own words out of the
BuildKit log's tail, not BuildKit's "executor failed running [...]". The build itself, failing on the
real engine, is tests/integration/test_engine_client.py's test_a_failed_step_names_its_real_cause."""

from __future__ import annotations


def test_failure_cause_prefers_the_tools_own_words():
    from servebuild.build.docker import failure_cause

    tail = [
        "#10 [deps 3/4] RUN pip install -r /opt/servebuild/requirements.txt",
        "#10 1.2 Looking in indexes: https://pypi.org/simple",
        "#10 5.6 ERROR: Could not find a version that satisfies the requirement torch==2.11.0",
        "#10 5.7 ERROR: No matching distribution found for torch==2.11.0",
        "#10 ERROR: executor failed running [/bin/bash -o pipefail -c pip install -r x]: exit code: 1",
        "------",
        " > [deps 3/4] RUN pip install -r x:",
        "------",
        "executor failed running [/bin/bash -o pipefail -c pip install -r x]: exit code: 1",
    ]
    cause = failure_cause(tail)
    assert cause.startswith("ERROR: No matching distribution found for torch==2.11.0"), cause
    assert "in step: /bin/bash -o pipefail -c pip install" in cause
    assert failure_cause(["#5 ERROR: executor failed running [x]: exit code: 2"]).startswith("ERROR: executor")
    # seen on an arm64 build: a concurrent step's header (it quotes our Python check's message) and
    # its CANCELED line come after the failed step; the cause is still the failed step's own words
    tail = [
        "#10 [deps 4/4] RUN pip install --require-hashes -r /opt/servebuild/requirements.txt",
        "#10 48.96 Could not fetch URL https://pypi.org/simple/aiohappyeyeballs/: There was a problem",
        "#10 48.99 ERROR: Could not find a version that satisfies the requirement aiohappyeyeballs==2.7.1",
        "#10 49.00 ERROR: No matching distribution found for aiohappyeyeballs==2.7.1",
        "#10 ERROR: executor failed running [/bin/bash -o pipefail -c pip install]: exit code: 1",
        "#5 [runtime 2/11] RUN apt-get install -y python3 && python3 -c \"sys.exit('base image has Python ' + v)\"",
        "#5 sha256:d5a4cdb8e118f4d2e9ace106ab9eddd4e031f6d59f0a6f71c351a1cf8467f086",
        "#5 CANCELED",
        "------",
        " > [deps 4/4] RUN pip install:",
        "------",
        "executor failed running [/bin/bash -o pipefail -c pip install]: exit code: 1",
    ]
    cause = failure_cause(tail)
    assert cause.startswith("ERROR: No matching distribution found for aiohappyeyeballs==2.7.1"), cause
