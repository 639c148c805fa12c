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


def test_an_untrusted_index_certificate_is_named_with_its_fix():
    """pip's last words are "No matching distribution", but the reason is the TLS check of an
    intercepting proxy's certificate: the line names that and the option that fixes it."""
    from servebuild.build.docker import failure_cause

    tail = [
        "#9 [deps 4/4] RUN pip install --require-hashes --no-deps -r /opt/servebuild/requirements.txt",
        "#9 0.788 WARNING: Retrying (Retry(total=4)) after connection broken by 'SSLError(SSLCertVerificationError("
        "1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate "
        "chain (_ssl.c:992)'))': /simple/aiohappyeyeballs/",
        "#9 8.435 Could not fetch URL https://pypi.org/simple/aiohappyeyeballs/: There was a problem confirming "
        "the ssl certificate: HTTPSConnectionPool(host='pypi.org', port=443): Max retries exceeded",
        "#9 8.448 ERROR: Could not find a version that satisfies the requirement aiohappyeyeballs==2.7.1",
        "#9 8.448 ERROR: No matching distribution found for aiohappyeyeballs==2.7.1",
        "#9 ERROR: executor failed running [/bin/bash -o pipefail -c pip install]: exit code: 1",
    ]
    cause = failure_cause(tail)
    assert "self-signed certificate in certificate chain" in cause, cause
    assert "--ca-bundle" in cause and "SERVEBUILD_CA_BUNDLE" in cause, cause
    assert "\n" not in cause
    # a certificate error in a step that did not fail is not the cause
    tail[-1] = "#7 0.1 WARNING: SSL: CERTIFICATE_VERIFY_FAILED"
    tail.append("#9 ERROR: executor failed running [/bin/bash -o pipefail -c pip install]: exit code: 1")
    assert "--ca-bundle" not in failure_cause([t for t in tail if not t.startswith("#9 0.788")])


def test_an_import_error_found_by_the_profile_check_is_the_builds_one_line():
    """A patched module the engine's parser path imports asks the base for a name it lacks (issue 43): the
    check's own line is the cause, not the Traceback or BuildKit's exit code."""
    from servebuild.build.docker import failure_cause

    ours = (
        "servebuild: recipe sglang-native-fp8, launch profile sglang-native-fp8: servebuild cannot hook sglang "
        "0.5.16+sb4.0123456789ab's argument parser: ImportError: cannot import name 'get_exec' from "
        "'sglang.srt.utils' (/opt/venv/lib/python3.12/site-packages/sglang/srt/utils/__init__.py)"
    )
    tail = [
        "#21 [check 2/2] RUN /opt/venv/bin/python /opt/servebuild/argcheck/profile_check.py --recipe r",
        "#21 41.2 profile check: 1 of 1 profiles replayed after one import of sglang",
        f"#21 41.2 {ours}",
        '#21 ERROR: process "/bin/sh -c /opt/venv/bin/python /opt/servebuild/argcheck/profile_check.py" '
        "did not complete successfully: exit code: 1",
    ]
    assert failure_cause(tail) == ours.removeprefix("servebuild: ")
