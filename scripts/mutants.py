"""A mutation check of the promises the test suite defends (issue 19); without an engine unless --engine.

Each mutant is one small change to the code (FILE, OLD text, NEW text: OLD must occur exactly
once) and the tests that must notice it. Every mutant runs on one temporary copy of the tree
(tracked and untracked, non-ignored files; the change is undone after each), with only its named
tests, in this interpreter (the project's .venv). A mutant is killed when those tests fail; it
survives when they pass. The copy's own `servebuild/` is the one imported (tests/conftest.py puts
the tree first on sys.path); each run checks that first, and a mutant whose OLD text is gone from
the code is reported as stale (the list must follow the code), never as killed. Hypothesis runs
with the "mutants" profile (tests/conftest.py: the ci examples, derandomized, no shrinking).

    .venv/bin/python scripts/mutants.py              # every mutant: killed/survived, and the ratio
    .venv/bin/python scripts/mutants.py --list       # the table only
    .venv/bin/python scripts/mutants.py yaml-depth   # the mutants whose id contains a word
    .venv/bin/python scripts/mutants.py --baseline   # also run each mutant's tests on the real code
    .venv/bin/python scripts/mutants.py --engine     # also the mutants whose tests need a Docker engine

Exit status: 0 when every mutant is killed, 1 when one survives or is stale.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUZZ = "tests/unit/test_fuzz_fields.py"


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]  # pytest node ids or FILE::-k-free prefixes; FILE -k EXPR as "FILE -k EXPR"
    note: str = ""
    engine: bool = False  # its tests build or run images (a Docker engine): only with --engine


def can_be_made(m: Mutant, text: str) -> bool:
    """The mutant's text occurs exactly once in its file's `text` (else it is STALE: not made, not counted)."""
    return text.count(m.old) == 1


def t(name: str, file: str) -> str:
    return f"{file}::{name}"


HOSTILE = "tests/cli/test_hostile_registry.py"
CLIENT = "tests/unit/test_registry_client.py"
YAML = "tests/unit/test_yaml_bounds.py"
FIELDS = "tests/unit/test_recipe_fields.py"
ARCHIVES = "tests/unit/test_source_archives.py"
BISECT = "tests/unit/test_bisect.py"
SIGNING = "tests/unit/test_signing.py"
PLAN = "tests/unit/test_plan.py"
JIT_PROBES = "tests/unit/test_jit_probes.py"
DEB = "tests/unit/test_debian_base.py"
PINS = "tests/cli/test_debian_pins.py"
REBUILD = "tests/unit/test_rebuild_registry.py"
BOUNDS = "tests/unit/test_registry_bounds.py"
FAKES = "tests/unit/test_in_image_fake_packages.py"
SPECIAL = "tests/unit/test_in_image_special_files.py"
LOCKT = "tests/unit/test_lock_types.py"
WARMB = "tests/unit/test_warm_bounds.py"
CENSUS = "tests/unit/test_census_compiles.py"
SETTLE = "tests/unit/test_settle.py"
CONFINED = "tests/unit/test_cache_tool_confined.py"
WIRE = "tests/unit/test_bench_wire.py"
REUSE = "tests/unit/test_stage_reuse.py"
ONEIMPORT = "tests/unit/test_profile_check_one_import.py"
IDS = "tests/unit/test_committed_ids.py"
DEBH = "tests/unit/test_debian_pins_held.py"
LIMITS_T = "tests/unit/test_input_limits.py"
SUMS = "tests/unit/test_bench_and_bisect_summaries.py"
INFO = "tests/unit/test_servebuild_info.py"
CACHET = "tests/unit/test_cache_tool_confined.py"
COPYUPS = "tests/unit/test_copyups.py"
PAYLOAD_T = "tests/unit/test_payload_row.py"


def h(mode: str) -> str:
    """The hostile-registry case of `mode` (a -k expression on the parametrized verify test)."""
    return f"{HOSTILE} -k {mode}"


MUTANTS = [
    # YAML nesting: servebuild's own limit, not libyaml's 1,000
    Mutant(
        "yaml-depth-64000",
        "servebuild/yamlfile.py",
        "MAX_YAML_DEPTH = 64 ",
        "MAX_YAML_DEPTH = 64_000 ",
        (t("test_yaml_past_the_depth_limit_is_refused_by_servebuild_not_by_libyaml", YAML),),
    ),
    Mutant(
        "yaml-depth-off-by-one-up",
        "servebuild/yamlfile.py",
        "if depth > MAX_YAML_DEPTH:",
        "if depth > MAX_YAML_DEPTH + 1:",
        (t("test_yaml_past_the_depth_limit_is_refused_by_servebuild_not_by_libyaml", YAML),),
    ),
    Mutant(
        "yaml-depth-off-by-one-down",
        "servebuild/yamlfile.py",
        "if depth > MAX_YAML_DEPTH:",
        "if depth >= MAX_YAML_DEPTH:",
        (t("test_yaml_at_the_depth_limit_is_read", YAML),),
    ),
    # a profile's port
    Mutant(
        "port-le-99999",
        "servebuild/engines/profiles.py",
        "Field(default=None, ge=1, le=65535)",
        "Field(default=None, ge=1, le=99999)",
        (t("test_a_profile_port_out_of_range_or_not_an_integer_is_refused", FIELDS),),
    ),
    Mutant(
        "port-ge-0",
        "servebuild/engines/profiles.py",
        "Field(default=None, ge=1, le=65535)",
        "Field(default=None, ge=0, le=65535)",
        (t("test_a_profile_port_out_of_range_or_not_an_integer_is_refused", FIELDS),),
    ),
    Mutant(
        "port-unbounded",
        "servebuild/engines/profiles.py",
        "Field(default=None, ge=1, le=65535)",
        "Field(default=None)",
        (t("test_a_profile_port_out_of_range_or_not_an_integer_is_refused", FIELDS),),
    ),
    Mutant(
        "profile-not-strict",
        "servebuild/engines/profiles.py",
        'model_config = ConfigDict(extra="forbid", frozen=True, strict=True)',
        'model_config = ConfigDict(extra="forbid", frozen=True)',
        (t("test_a_profile_port_out_of_range_or_not_an_integer_is_refused", FIELDS),),
        "a string or bool port would be coerced",
    ),
    # launch directories
    Mutant(
        "abs-dir-any-char",
        "servebuild/recipe/grammar.py",
        'ABS_DIR = re.compile(r"^(/[A-Za-z0-9_.][A-Za-z0-9_.-]*)+/?\\Z")',
        'ABS_DIR = re.compile(r"^(/[^/\\n]+)+/?\\Z")',
        (t("test_a_launch_directory_with_a_space_or_dollar_is_refused", FIELDS),),
    ),
    Mutant(
        "abs-dir-dollar",
        "servebuild/recipe/grammar.py",
        'ABS_DIR = re.compile(r"^(/[A-Za-z0-9_.][A-Za-z0-9_.-]*)+/?\\Z")',
        'ABS_DIR = re.compile(r"^(/[A-Za-z0-9_.$][A-Za-z0-9_.${}-]*)+/?\\Z")',
        (t("test_a_launch_directory_with_a_space_or_dollar_is_refused", FIELDS),),
    ),
    Mutant(
        "cache-dirs-unchecked",
        "servebuild/recipe/schema.py",
        "matches(ABS_DIR, d, \"an absolute cache directory (letters, digits, '._-')\")",
        "pass",
        (t("test_a_launch_directory_with_a_space_or_dollar_is_refused", FIELDS),),
    ),
    # vLLM DSpark
    Mutant(
        "dspark-case-sensitive",
        "servebuild/engines/vllm/__init__.py",
        'if str(config.get("method", "")).lower() == "dspark":',
        'if str(config.get("method", "")) == "dspark":',
        (t("test_vllm_dspark_is_recognised_in_any_case", FIELDS),),
    ),
    # exec bits
    Mutant(
        "tarball-drops-exec-bit",
        "servebuild/sources/archives.py",
        'tarfile.REGTYPE, 0o755 if mode == "100755" else 0o644)',
        "tarfile.REGTYPE, 0o644)",
        (t("test_the_source_tarball_keeps_the_exec_bit_and_only_that", ARCHIVES),),
    ),
    Mutant(
        "tarball-exec-for-all",
        "servebuild/sources/archives.py",
        'tarfile.REGTYPE, 0o755 if mode == "100755" else 0o644)',
        "tarfile.REGTYPE, 0o755)",
        (t("test_the_source_tarball_keeps_the_exec_bit_and_only_that", ARCHIVES),),
    ),
    Mutant(
        "release-drops-exec-bit",
        "servebuild/sources/archives.py",
        "target.chmod(0o755 if mode & 0o111 else 0o644)",
        "target.chmod(0o644)",
        (t("test_a_release_archive_keeps_the_exec_bit_and_only_that", ARCHIVES),),
    ),
    # unsafe paths in release archives
    Mutant(
        "release-allows-dotdot",
        "servebuild/sources/archives.py",
        'if rel.startswith("/") or ".." in rel.split("/"):',
        'if rel.startswith("/"):',
        (t("test_a_release_archive_with_a_path_out_of_the_tree_is_refused", ARCHIVES),),
    ),
    Mutant(
        "release-allows-absolute",
        "servebuild/sources/archives.py",
        'if rel.startswith("/") or ".." in rel.split("/"):',
        'if ".." in rel.split("/"):',
        (t("test_a_release_archive_with_a_path_out_of_the_tree_is_refused", ARCHIVES),),
    ),
    # bisect
    Mutant(
        "bisect-first-json-line",
        "servebuild/check/bisect.py",
        "def _last_object(lines: list[str]) -> dict:\n    for line in reversed(lines):",
        "def _last_object(lines: list[str]) -> dict:\n    for line in lines:",
        (t("test_of_several_json_lines_the_last_one_counts", BISECT),),
    ),
    Mutant(
        "bisect-first-metrics-file",
        "servebuild/check/bisect.py",
        "    for line in reversed(lines):\n        if line.startswith(METRICS_MARK",
        "    for line in lines:\n        if line.startswith(METRICS_MARK",
        (t("test_of_several_metrics_files_the_last_one_counts", BISECT),),
    ),
    Mutant(
        "bisect-first-cache-census",
        "servebuild/check/bisect.py",
        "for line in reversed(lines) if line.startswith(CACHE_MARK",
        "for line in lines if line.startswith(CACHE_MARK",
        (t("test_of_several_cache_censuses_the_last_one_counts", BISECT),),
    ),
    Mutant(
        "bisect-ignores-exit",
        "servebuild/check/bisect.py",
        'return "pass" if row.exit == 0 else "fail"',
        'return "pass"',
        (t("test_the_outcome_without_a_metric_is_the_exit_status", BISECT),),
    ),
    Mutant(
        "bisect-timeout-is-fail",
        "servebuild/check/bisect.py",
        'if row.exit is None:\n        return "timeout"',
        'if row.exit is None:\n        return "fail"',
        (t("test_the_outcome_without_a_metric_is_the_exit_status", BISECT),),
    ),
    Mutant(
        "bisect-row-last-exit",
        "servebuild/check/bisect.py",
        "next((e for e in exits if e != 0), 0)",
        "exits[-1]",
        (t("test_a_row_exits_with_its_first_failing_run", BISECT),),
    ),
    # signing key mode
    Mutant(
        "sign-key-group-readable",
        "servebuild/release/signing.py",
        "    if mode & 0o077:",
        "    if mode & 0o007:",
        (t("test_a_signing_key_others_can_read_is_refused", SIGNING),),
    ),
    Mutant(
        "sign-key-other-readable",
        "servebuild/release/signing.py",
        "    if mode & 0o077:",
        "    if mode & 0o070:",
        (t("test_a_signing_key_others_can_read_is_refused", SIGNING),),
    ),
    Mutant(
        "sign-key-any-mode",
        "servebuild/release/signing.py",
        "    if mode & 0o077:",
        "    if False:",
        (t("test_a_signing_key_others_can_read_is_refused", SIGNING),),
    ),
    Mutant(
        "sign-key-owner-only-refused",
        "servebuild/release/signing.py",
        "    if mode & 0o077:",
        "    if mode & 0o477:",
        (t("test_a_signing_key_only_its_owner_can_read_is_loaded", SIGNING),),
    ),
    # passwords in error lines
    Mutant(
        "password-quoted-repr",
        "servebuild/release/credentials.py",
        'raise CredentialsError("password holds a control character',
        'raise CredentialsError(f"password {password!r} holds a control character',
        (
            t("test_a_credentials_file_password_with_a_control_character_is_refused_unquoted", CLIENT),
            t("test_a_docker_config_password_with_a_control_character_is_refused_unquoted", CLIENT),
        ),
    ),
    Mutant(
        "password-quoted-raw",
        "servebuild/release/credentials.py",
        'raise CredentialsError("password holds a control character',
        'raise CredentialsError(f"password {password} holds a control character',
        (t("test_a_credentials_file_password_with_a_control_character_is_refused_unquoted", CLIENT),),
    ),
    Mutant(
        "password-control-accepted",
        "servebuild/release/credentials.py",
        "if any(not c.isprintable() for c in password):",
        "if False:",
        (t("test_a_credential_helper_password_with_a_control_character_is_refused_unquoted", CLIENT),),
    ),
    # the default platform
    Mutant(
        "default-platform-amd64",
        "servebuild/recipe/schema.py",
        'platforms: list[str] = ["linux/arm64"]',
        'platforms: list[str] = ["linux/amd64"]',
        (t("test_a_recipe_without_platforms_is_for_linux_arm64_as_documented", PLAN),),
    ),
    Mutant(
        "no-platform-ignores-host",
        "servebuild/plan/make.py",
        "platform = wanted or (host if host in recipe.platforms else recipe.platforms[0])",
        "platform = wanted or recipe.platforms[0]",
        (t("test_without_platform_a_build_is_for_the_host_if_listed_else_the_first_listed", PLAN),),
    ),
    Mutant(
        "no-platform-last-listed",
        "servebuild/plan/make.py",
        "platform = wanted or (host if host in recipe.platforms else recipe.platforms[0])",
        "platform = wanted or (host if host in recipe.platforms else recipe.platforms[-1])",
        (t("test_without_platform_a_build_is_for_the_host_if_listed_else_the_first_listed", PLAN),),
    ),
    # the fuzz test's oracle: control characters are refused in every field
    Mutant(
        "profile-description-control-ok",
        "servebuild/engines/profiles.py",
        '@field_validator("description", "args", "extra_args")',
        '@field_validator("extra_args")',
        (
            f"{FUZZ}::test_a_value_with_a_control_character_is_refused_in_every_field[launch.profiles.p.description]",
            f"{FUZZ}::test_a_value_with_a_control_character_is_refused_in_every_field[launch.profiles.p.args.1]",
        ),
    ),
    Mutant(
        "env-value-control-ok",
        "servebuild/engines/profiles.py",
        'printable(value, f"env {key}")',
        "pass",
        (f"{FUZZ}::test_a_value_with_a_control_character_is_refused_in_every_field[launch.profiles.p.env.A_B]",),
    ),
    # the bad-input harness: "no image tagged" only counts when the engine answered
    Mutant(
        "no-image-check-trusts-silence",
        "tests/integration/test_bad_input.py",
        'if "no such image" in proc.stderr.lower():',
        "if True:",
        ("tests/integration/test_bad_input.py::test_the_no_image_check_fails_if_the_engine_does_not_answer",),
    ),
    # the bounded registry client (servebuild/registry/) against tests/hostile_registry.py
    Mutant(
        "registry-no-request-deadline",
        "servebuild/registry/client.py",
        'with deadline(self.request_s, f"{method} {_shown(_path(url))}"):',
        'with deadline(86400, f"{method} {_shown(_path(url))}"):',
        (h("slow-loris-body"),),
    ),
    Mutant(
        "registry-no-operation-deadline",
        "servebuild/release/verify.py",
        'with client.operation(f"verify of {ref}"):',
        "if True:",
        (f"{HOSTILE}::test_the_operation_deadline_bounds_many_slow_requests",),
    ),
    Mutant(
        "registry-content-length-ignored",
        "servebuild/registry/bounded.py",
        "if declared is not None and str(declared).strip().isdigit() and int(declared) > limit:",
        "if False:",
        (h("huge-manifest]"),),
    ),
    Mutant(
        "registry-size-checked-after-read",
        "servebuild/registry/bounded.py",
        "        if size > limit:\n",
        "        if False:\n",
        (h("huge-manifest-undeclared"),),
    ),
    Mutant(
        "registry-json-depth-unchecked",
        "servebuild/registry/bounded.py",
        "    if depth(doc) > max_depth:",
        "    if False:",
        (h("deep-json-500"),),
    ),
    Mutant(
        "registry-token-json-unchecked",
        "servebuild/registry/client.py",
        "parse_json(response._content, what, limits.JSON_DEPTH)  # oras-py",
        "pass  # oras-py",
        (h("token-deep"),),
    ),
    Mutant(
        "registry-redirects-unbounded",
        "servebuild/registry/client.py",
        "for hop in range(limits.REDIRECTS + 1):",
        "for hop in range(10_000):",
        (h("redirect-many"),),
    ),
    Mutant(
        "registry-redirect-loop-followed",
        "servebuild/registry/client.py",
        "if url in seen:",
        "if False:",
        (h("redirect-loop"),),
    ),
    Mutant(
        "registry-any-host-redirect",
        "servebuild/registry/client.py",
        'if not blob or urlsplit(target).scheme != "https":',
        "if False:",
        (h("redirect-away"), f"{CLIENT}::test_a_blob_redirect_to_plain_http_on_another_host_is_refused"),
    ),
    Mutant(
        "registry-credentials-to-cdn",
        "servebuild/registry/client.py",
        '    request.headers.pop("Authorization", None)',
        "    pass",
        (f"{CLIENT}::test_a_blob_read_may_move_to_another_https_host_without_the_credentials",),
    ),
    Mutant(
        "registry-cdn-tls-unverified",
        "servebuild/registry/client.py",
        ', "verify": str(self.ca) if self.ca else True}',
        "}",
        (f"{CLIENT}::test_a_blob_read_may_move_to_another_https_host_without_the_credentials",),
    ),
    Mutant(
        "registry-manifest-digest-unchecked",
        "servebuild/registry/client.py",
        "if claimed and digest != claimed:",
        "if False:",
        (h("wrong-digest"), h("tag-digest-lie")),
    ),
    Mutant(
        "registry-blob-digest-unchecked",
        "servebuild/registry/client.py",
        '        actual = "sha256:" + sha256_bytes(body)\n        if actual != digest:\n',
        '        actual = "sha256:" + sha256_bytes(body)\n        if False:\n',
        (h("wrong-blob"),),
    ),
    Mutant(
        "registry-streamed-blob-digest-unchecked",
        "servebuild/registry/client.py",
        '        actual = "sha256:" + sha256_file(Path(sink.name))\n        if actual != digest:\n',
        '        actual = "sha256:" + sha256_file(Path(sink.name))\n        if False:\n',
        ("tests/unit/test_rebuild_parts.py::test_a_layer_blob_is_streamed_to_disk_within_its_limit_and_checked",),
    ),
    Mutant(
        "registry-artifact-name-unchecked",
        "servebuild/release/provenance.py",
        "if title and not (isinstance(title, str) and PLAIN_FILE_NAME.fullmatch(title)",
        "if False and (title",
        (h("escaping-referrer"),),
    ),
    Mutant(
        "registry-seconds-unchecked",
        "servebuild/registry/limits.py",
        "if not (0 < value <= 86400):",
        "if False:",
        (f"{HOSTILE}::test_a_bad_deadline_variable_is_one_line",),
    ),
    Mutant(
        "publish-check-phase-undeadlined",
        "servebuild/release/publish.py",
        'with client.operation(f"checking what {tag} of {repo} names now"):',
        "if True:",
        (f"{CLIENT}::test_publish_checks_the_tag_within_the_operation_deadline",),
    ),
    Mutant(
        "publish-read-back-extra-platform",
        "servebuild/release/publish.py",
        "if set(served) != {b.platform for b in builds}:",
        "if False:",
        (f"{CLIENT}::test_publish_read_back_refuses_an_index_naming_other_or_extra_platforms",),
    ),
    Mutant(
        "index-page-no-deadline",
        "servebuild/registry/index.py",
        'with deadline(seconds, f"GET {url}"):',
        'with deadline(86400, f"GET {url}"):',
        ("tests/unit/test_index_bounds.py::test_an_index_page_that_trickles_ends_at_its_deadline",),
    ),
    Mutant(
        "release-file-unlimited",
        "servebuild/sources/artifacts.py",
        'limit=LIMITS["artifact"].max_bytes',
        "limit=1 << 40",
        (
            "tests/unit/test_index_bounds.py::test_a_release_file_declaring_more_than_its_limit_is_"
            "refused_before_it_is_read",
        ),
    ),
    Mutant(
        "release-file-in-memory",
        "servebuild/registry/bounded.py",
        "        if sink is not None:\n",
        "        if False:\n",
        ("tests/unit/test_index_bounds.py::test_a_large_release_file_is_streamed_to_disk",),
    ),
    # the smoke suite's own checks against tools that would fool them
    Mutant(
        "jit-cext-always-ok",
        "tests/image/jit_probes.py",
        "    ok = got == 42",
        "    ok = True",
        (f"{JIT_PROBES}::test_cext_probe_fails_when_the_built_module_computes_wrong",),
    ),
    Mutant(
        "jit-nvcc-any-13",
        "tests/image/jit_probes.py",
        'if not primary.startswith(want + "."):',
        'if not primary.startswith("13."):',
        (f"{JIT_PROBES}::test_nvcc_probe_fails_on_any_release_but_13_0",),
    ),
    Mutant(
        "jit-nvcc-others-ignored",
        "tests/image/jit_probes.py",
        "    if others:\n",
        "    if False:\n",
        (f"{JIT_PROBES}::test_nvcc_probe_passes_on_13_0_and_fails_on_a_second_nvcc_that_differs",),
    ),
    Mutant(
        "smoke-toolkit-any-13",
        "tests/image/test_smoke.py",
        'assert version.startswith(expect["cuda"]), f"{what} is {version}',
        'assert version.startswith("13"), f"{what} is {version}',
        ("tests/integration/test_smoke_fixtures.py -k not_13_0",),
        engine=True,
    ),
    # every input file bounded, exact lock types, names, links
    Mutant(
        "patch-limit-raised",
        "servebuild/fsutil.py",
        '"patch": Limit("a local patch", 8 << 20, 200_000)',
        '"patch": Limit("a local patch", 8 << 30, 200_000)',
        ("tests/unit/test_input_limits.py::test_a_patch_over_8_mib_is_refused_naming_file_limit_and_size",),
    ),
    Mutant(
        "duplicate-pins-allowed",
        "servebuild/recipe/requirements.py",
        "    if key in seen:\n",
        "    if False:\n",
        ("tests/unit/test_input_limits.py::test_a_package_pinned_twice_is_refused_naming_file_line_and_package",),
    ),
    Mutant(
        "lock-any-version",
        "servebuild/lock/lockfile.py",
        "        if v != LOCK_VERSION:",
        "        if False:",
        ("tests/unit/test_lock_types.py::test_a_lock_version_other_than_1_is_refused",),
    ),
    Mutant(
        "recipe-link-out-allowed",
        "servebuild/recipe/load.py",
        "if absolute.is_relative_to(root.absolute()) and not path.resolve().is_relative_to(root.resolve()):",
        "if False:",
        ("tests/unit/test_recipe_symlinks.py::test_a_recipe_symlinked_outside_the_project_is_refused",),
    ),
    # the base as a function of the lock's Debian side (issue 29)
    Mutant(
        "base-keeps-logs",
        "servebuild/sources/rootfs.py",
        "and (member.size > 0 or not member.isreg())",
        "and False",
        (
            f"{DEB}::test_no_log_with_content_stays_but_the_empty_ones_and_the_directories_do",
            f"{DEB}::test_two_bootstraps_on_other_hosts_other_days_normalise_to_the_same_bytes",
        ),
    ),
    Mutant(
        "base-keeps-aux-cache",
        "servebuild/sources/rootfs.py",
        '    "var/cache/ldconfig/aux-cache",\n    "etc/machine-id",',
        '    "etc/machine-id",',
        (f"{DEB}::test_the_ldconfig_aux_cache_goes_and_its_directory_stays",),
    ),
    Mutant(
        "base-keeps-clock-mtimes",
        "servebuild/sources/rootfs.py",
        "member.mtime = min(int(member.mtime), epoch)",
        "member.mtime = int(member.mtime)",
        (f"{DEB}::test_every_mtime_is_at_most_the_release_date_and_older_ones_are_kept",),
    ),
    Mutant(
        "base-mtimes-all-epoch",
        "servebuild/sources/rootfs.py",
        "member.mtime = min(int(member.mtime), epoch)",
        "member.mtime = epoch",
        (f"{DEB}::test_every_mtime_is_at_most_the_release_date_and_older_ones_are_kept",),
    ),
    Mutant(
        "base-keeps-shadow-day",
        "servebuild/sources/rootfs.py",
        "                    data = _shadow_day(data, day)",
        "                    pass",
        (f"{DEB}::test_the_shadow_day_is_the_release_day",),
    ),
    Mutant(
        "base-keeps-hostname",
        "servebuild/sources/rootfs.py",
        '                if name in MOUNT_TARGETS:\n                    data = b""',
        '                if False:\n                    data = b""',
        (f"{DEB}::test_the_hosts_names_and_resolver_are_not_in_the_base",),
    ),
    Mutant(
        "base-keeps-debs",
        "servebuild/sources/rootfs.py",
        "return any(key.startswith(p) and key != p for p in DROPPED_PREFIXES)",
        "return False",
        (f"{DEB}::test_no_deb_apt_list_package_cache_or_debootstrap_leftover_stays",),
    ),
    Mutant(
        "base-created-now",
        "servebuild/build/bases.py",
        "return iso_time(dt.datetime.fromtimestamp(pins.release.epoch, dt.timezone.utc))",
        "return iso_time(dt.datetime.now(dt.timezone.utc))",
        (f"{DEB}::test_the_base_image_is_created_at_the_release_date_not_now",),
    ),
    Mutant(
        "rootfs-key-suite-only",
        "servebuild/lock/debian.py",
        '"base": [p.model_dump() for p in self.base],',
        '"base": [],',
        (f"{DEB}::test_the_rootfs_cache_key_is_what_the_rootfs_is_made_of_not_the_suite",),
    ),
    Mutant(
        "older-release-accepted",
        "servebuild/lock/debian.py",
        "release.epoch < locked.epoch",
        "release.epoch < 0",
        (f"{DEB}::test_a_release_older_than_the_locks_is_refused_in_one_line",),
    ),
    Mutant(
        "deb-hash-unchecked",
        "servebuild/sources/debs.py",
        "        if got != pkg.sha256:",
        "        if False:",
        (f"{PINS}::test_a_deb_whose_bytes_differ_from_the_locks_hash_is_refused_and_not_kept",),
    ),
    Mutant(
        "deb-cache-unchecked",
        "servebuild/sources/debs.py",
        "if path.is_file() and not path.is_symlink() and sha256_file(path) == pkg.sha256:",
        "if path.is_file():",
        (f"{PINS}::test_a_cached_deb_that_was_altered_is_not_used_offline",),
    ),
    Mutant(
        "stale-apt-step-accepted",
        "servebuild/lock/debian.py",
        "if step is None or step.requested != sorted(pkgs):",
        "if step is None:",
        (f"{DEB}::test_a_lock_whose_apt_step_is_not_what_is_rendered_is_stale_in_one_line",),
    ),
    Mutant(
        "nvcc-temp-names-kept",
        "servebuild/tools/aot_build.py",
        "        fixed = NVCC_TEMP_NAME.sub(CANONICAL_TEMP_NAME, data)",
        "        fixed = data",
        ("tests/unit/test_aot_settled.py::test_nvccs_temporary_names_are_made_one_so_two_compiles_are_the_same_bytes",),
    ),
    Mutant(
        "committed-first-layer-wrong",
        "servebuild/build/committed.py",
        'f"{i + 1} of {len(layers)}',
        'f"{i} of {len(layers)}',
        (f"{DEB}::test_the_verdict_names_the_first_differing_layer",),
    ),
    # issue 31, point 10 and the new code: rebuild --check (servebuild/release/rebuild.py, build/imageconfig.py)
    Mutant(
        "rebuild-config-only-difference-identical",
        "servebuild/release/rebuild.py",
        "        if rebuilt_id != image.config_digest:",
        "        if False:",
        (f"{REBUILD}::test_two_images_whose_configs_alone_differ_are_called_different",),
    ),
    Mutant(
        "rebuild-names-every-differing-layer",
        "servebuild/release/rebuild.py",
        "            return report\n        if rebuilt_id",
        "            continue\n        if rebuilt_id",
        (f"{REBUILD}::test_only_the_first_differing_layer_is_named",),
    ),
    Mutant(
        "rebuild-first-of-two-index-entries",
        "servebuild/release/rebuild.py",
        "if len(digests) > 1:",
        "if False:",
        (f"{REBUILD}::test_an_index_with_two_entries_for_the_platform_is_refused_in_one_line",),
    ),
    Mutant(
        "rebuild-diff-id-unchecked",
        "servebuild/release/rebuild.py",
        "if not problem and content != diff_ids[i]:",
        "if False:",
        (
            f"{REBUILD}::test_a_layer_matching_its_blob_digest_but_not_its_diff_id_is_an_integrity_error_before_any_build",
        ),
    ),
    Mutant(
        "rebuild-manifest-config-layer-count-unchecked",
        "servebuild/release/rebuild.py",
        "if len(out.diff_ids) != len(layers):",
        "if False:",
        (f"{REBUILD}::test_a_config_naming_other_than_one_diff_id_per_layer_is_refused_before_a_layer_get",),
    ),
    Mutant(
        "rebuild-save-config-unlimited",
        "servebuild/build/imageconfig.py",
        "                if member.size > CONFIG_LIMIT:",
        "                if False:",
        (f"{REBUILD}::test_a_docker_save_config_is_read_within_its_size_limit",),
    ),
    Mutant(
        "rebuild-save-config-at-limit-refused",
        "servebuild/build/imageconfig.py",
        "                if member.size > CONFIG_LIMIT:",
        "                if member.size >= CONFIG_LIMIT:",
        (f"{REBUILD}::test_a_docker_save_config_is_read_within_its_size_limit",),
    ),
    Mutant(
        "rebuild-inflate-unbounded",
        "servebuild/release/rebuild.py",
        "                if size > limit:",
        "                if False:",
        (
            f"{REBUILD}::test_a_layer_that_inflates_past_its_bound_is_refused_naming_its_digest",
            f"{REBUILD}::test_uncompressing_a_layer_stops_writing_at_its_limit",
        ),
    ),
    Mutant(
        "rebuild-inflate-bound-per-layer",
        "servebuild/release/rebuild.py",
        "inflated_limit(blobs) - inflated,",
        "inflated_limit(blob.stat().st_size),",
        (f"{REBUILD}::test_many_layers_each_within_the_bound_are_bounded_together",),
    ),
    Mutant(
        "rebuild-inflate-no-floor",
        "servebuild/release/rebuild.py",
        "return max(limits.LAYER_INFLATE_FLOOR, min(",
        "return max(0, min(",
        (f"{REBUILD}::test_the_inflated_bound_is_a_hundred_times_the_blob_with_a_64_mib_floor",),
    ),
    Mutant(
        "rebuild-layer-read-not-one-operation",
        "servebuild/release/rebuild.py",
        "with client.operation(f\"reading layer {i} ({str(desc.get('digest', ''))[:80]}) of {image.ref}\"):",
        "if True:",
        (f"{REBUILD}::test_a_layer_trickled_a_byte_at_a_time_ends_at_the_registry_deadline",),
    ),
    Mutant(
        "rebuild-no-total-deadline",
        "servebuild/release/rebuild.py",
        'with registry_reads(client.registry, f"{client.registry}/{repo}:{tag}", total_s):',
        "if True:",
        (f"{REBUILD}::test_the_registry_reads_of_one_rebuild_end_at_its_total_deadline",),
    ),
    Mutant(
        "rebuild-label-grammar-unchecked",
        "servebuild/release/rebuild.py",
        "if value and not NAME.match(value):",
        "if False:",
        (
            "tests/unit/test_rebuild_labels.py::test_a_label_that_is_not_a_name_is_refused_before_any_layer_is_fetched",
            f"{REBUILD}::test_a_hostile_label_fails_before_a_single_layer_blob_get",
        ),
    ),
    Mutant(
        "rebuild-plan-after-layers",
        "servebuild/release/rebuild.py",
        "            plan = rebuild_plan(root, image, ca_bundle, echo)  # before any layer is read\n"
        "            theirs = registry_layers(client, repo, image, work)",
        "            theirs = registry_layers(client, repo, image, work)\n"
        "            plan = rebuild_plan(root, image, ca_bundle, echo)",
        (f"{REBUILD}::test_a_label_naming_what_this_checkout_cannot_build_fails_before_a_layer_get",),
    ),
    Mutant(
        "rebuild-rootfs-shape-unchecked",
        "servebuild/release/rebuild.py",
        "    if not isinstance(rootfs, dict):\n        raise",
        "    if False:\n        raise",
        ("tests/unit/test_rebuild_labels.py::test_a_config_whose_rootfs_is_not_a_mapping_of_digests_is_one_line",),
    ),
    # the registry's bounded reads: JSON depth and Content-Length, exact
    Mutant(
        "json-depth-counted-one-short",
        "servebuild/registry/bounded.py",
        "deepest, todo = 0, [(doc, 1)]",
        "deepest, todo = 0, [(doc, 0)]",
        (f"{BOUNDS}::test_json_at_the_depth_limit_is_read_and_one_deeper_is_not",),
    ),
    Mutant(
        "json-depth-counted-one-long",
        "servebuild/registry/bounded.py",
        "deepest, todo = 0, [(doc, 1)]",
        "deepest, todo = 0, [(doc, 2)]",
        (f"{BOUNDS}::test_json_at_the_depth_limit_is_read_and_one_deeper_is_not",),
    ),
    Mutant(
        "content-length-at-limit-refused",
        "servebuild/registry/bounded.py",
        "str(declared).strip().isdigit() and int(declared) > limit:",
        "str(declared).strip().isdigit() and int(declared) >= limit:",
        (f"{BOUNDS}::test_a_body_exactly_at_its_limit_is_read_and_one_byte_more_is_not",),
    ),
    Mutant(
        "body-at-limit-refused",
        "servebuild/registry/bounded.py",
        "        if size > limit:\n",
        "        if size >= limit:\n",
        (f"{BOUNDS}::test_a_body_exactly_at_its_limit_is_read_and_one_byte_more_is_not",),
    ),
    # aot: the in-image builder (servebuild/tools/aot_build.py), run with fake packages
    Mutant(
        "aot-builder-wrote-nothing-accepted",
        "servebuild/tools/aot_build.py",
        "    if not new:\n        raise Refused",
        "    if False:\n        raise Refused",
        (f"{FAKES}::test_a_builder_that_writes_nothing_or_fails_is_one_line_naming_the_kernel",),
    ),
    Mutant(
        "aot-max-bytes-unenforced",
        "servebuild/tools/aot_build.py",
        'if total > spec["max_bytes"]:',
        "if False:",
        (f"{FAKES}::test_aot_max_bytes_is_enforced",),
    ),
    Mutant(
        "aot-max-bytes-at-limit-refused",
        "servebuild/tools/aot_build.py",
        'if total > spec["max_bytes"]:',
        'if total >= spec["max_bytes"]:',
        (f"{FAKES}::test_aot_max_bytes_is_enforced",),
    ),
    Mutant(
        "aot-failed-build-accepted",
        "servebuild/tools/aot_build.py",
        '        raise Refused(f"the build failed: {type(exc).__name__}: {text[-400:]}") from None',
        "        return {}, 0.0",
        (f"{FAKES}::test_a_builder_that_writes_nothing_or_fails_is_one_line_naming_the_kernel",),
    ),
    Mutant(
        "aot-settled-time-ignored",
        "servebuild/tools/aot_build.py",
        "    if settled.isdigit():\n        settle_ninja_state(cache, new,",
        "    if False:\n        settle_ninja_state(cache, new,",
        (f"{FAKES}::test_aot_puts_the_steps_settled_time_in_ninjas_state",),
    ),
    Mutant(
        "aot-ninja-log-keeps-clock",
        "servebuild/tools/aot_build.py",
        'rows = [["0", "0", str(settled_ns), *row[3:]] if len(row) == 5 else row for row in rows]',
        "rows = rows",
        ("tests/unit/test_aot_settled.py::test_settled_ninja_state_is_the_same_bytes_and_ninja_has_nothing_to_do",),
    ),
    Mutant(
        "aot-empty-cache-dir-seeded",
        "servebuild/tools/aot_build.py",
        "        if os.path.isdir(src) and not os.listdir(src):\n            continue",
        "        if False:\n            continue",
        (f"{FAKES}::test_an_empty_cache_directory_of_the_image_is_not_seeded",),
    ),
    # the created time: the newest exclude-newer date, not the oldest
    Mutant(
        "created-from-oldest-exclude-newer",
        "servebuild/plan/make.py",
        "        when, rel = dated[-1]",
        "        when, rel = dated[0]",
        ("tests/unit/test_settle.py::test_created_is_the_newest_exclude_newer_date_of_the_sets_the_image_installs",),
    ),
    # the JIT recorder (servebuild/tools/jit_record.py)
    Mutant(
        "jit-record-unplain-arg-replayable",
        "servebuild/tools/jit_record.py",
        "replayable=all(p is not None for p in plain))",
        "replayable=True)",
        (f"{FAKES}::test_the_recorder_says_which_builds_are_replayable",),
    ),
    Mutant(
        "jit-record-direct-load-replayable",
        "servebuild/tools/jit_record.py",
        "entry.update(builder=None, args=None, replayable=False)",
        "entry.update(builder=None, args=None, replayable=True)",
        (f"{FAKES}::test_the_recorder_says_which_builds_are_replayable",),
    ),
    Mutant(
        "jit-record-local-triton-replayable",
        "servebuild/tools/jit_record.py",
        '"replayable": target is not None and "<locals>" not in fn.name})',
        '"replayable": target is not None})',
        (f"{FAKES}::test_the_recorder_says_which_builds_are_replayable",),
    ),
    Mutant(
        "jit-record-no-target-replayable",
        "servebuild/tools/jit_record.py",
        '"replayable": target is not None and "<locals>" not in fn.name})',
        '"replayable": "<locals>" not in fn.name})',
        (f"{FAKES}::test_the_recorder_says_which_builds_are_replayable",),
    ),
    Mutant(
        "jit-record-without-o-append",
        "servebuild/tools/jit_record.py",
        "os.O_WRONLY | os.O_APPEND | os.O_CREAT",
        "os.O_WRONLY | os.O_CREAT",
        (f"{SPECIAL}::test_the_recorder_appends_after_what_the_file_holds",),
    ),
    Mutant(
        "jit-record-truncates",
        "servebuild/tools/jit_record.py",
        "os.O_WRONLY | os.O_APPEND | os.O_CREAT",
        "os.O_WRONLY | os.O_TRUNC | os.O_CREAT",
        (f"{SPECIAL}::test_the_recorder_appends_after_what_the_file_holds",),
    ),
    Mutant(
        "jit-record-through-linked-dir",
        "servebuild/tools/jit_record.py",
        "        dir_fd = open_dir(folder)",
        "        dir_fd = os.open(folder, os.O_RDONLY)",
        (f"{SPECIAL}::test_the_recorder_never_appends_through_a_linked_directory",),
    ),
    # the typed lock (servebuild/lock/lockfile.py)
    Mutant(
        "lock-stray-file-accepted",
        "servebuild/lock/lockfile.py",
        "    if stray is not None:\n",
        "    if False:\n",
        (f"{LOCKT}::test_a_lock_naming_a_file_the_recipe_does_not_name_is_refused",),
    ),
    Mutant(
        "lock-file-hash-not-sha256",
        "servebuild/lock/lockfile.py",
        "bad = next((k for k, digest in v.items() if not SHA256.match(digest)), None)",
        "bad = None",
        (f"{LOCKT}::test_a_lock_file_hash_that_is_not_a_sha256_is_refused",),
    ),
    Mutant(
        "lock-unresolved-overwrites-pin",
        "servebuild/lock/lockfile.py",
        "            if partial and not (p.commit and p.sha256):\n                return e",
        "            if False:\n                return e",
        (f"{LOCKT}::test_an_unresolved_lock_entry_leaves_the_recipes_own_pin",),
    ),
    Mutant(
        "lock-null-unresolved-refused",
        "servebuild/lock/lockfile.py",
        "        if v is None:  # `unresolved:` with nothing after it is an empty list",
        "        if False:",
        (f"{LOCKT}::test_a_lock_with_an_empty_unresolved_or_files_loads",),
    ),
    Mutant(
        "lock-stale-wrong-kind",
        "servebuild/lock/lockfile.py",
        '        raise IntegrityError(\n            f"lock is stale: recipe {loaded.recipe.name} changed since it was locked"',
        '        raise InputError(\n            f"lock is stale: recipe {loaded.recipe.name} changed since it was locked"',
        (f"{LOCKT}::test_a_stale_lock_is_an_integrity_error_naming_what_changed",),
    ),
    Mutant(
        "lock-stale-file-unchecked",
        "servebuild/lock/lockfile.py",
        "        if actual != digest:\n",
        "        if False:\n",
        (f"{LOCKT}::test_a_stale_lock_is_an_integrity_error_naming_what_changed",),
    ),
    Mutant(
        "lock-missing-file-unchecked",
        "servebuild/lock/lockfile.py",
        "    if missing:  # a lock that omits",
        "    if False:  # a lock that omits",
        (f"{LOCKT}::test_a_stale_lock_is_an_integrity_error_naming_what_changed",),
    ),
    Mutant(
        "lock-unresolved-built-locked",
        "servebuild/lock/lockfile.py",
        "    if lock.unresolved:\n",
        "    if False:\n",
        (f"{LOCKT}::test_a_lock_with_unresolved_entries_is_refused_for_a_locked_build",),
    ),
    # warm --check's exit status (servebuild/cli/warm.py)
    Mutant(
        "warm-check-always-0",
        "servebuild/cli/warm.py",
        "        return 1 if total else 0",
        "        return 0",
        (f"{WARMB}::test_warm_check_exits_1_when_the_command_added_cache_files_else_0",),
    ),
    Mutant(
        "warm-check-always-1",
        "servebuild/cli/warm.py",
        "        return 1 if total else 0",
        "        return 1",
        (f"{WARMB}::test_warm_check_exits_1_when_the_command_added_cache_files_else_0",),
    ),
    # the census of servebuild-cache (servebuild/tools/servebuild_cache.py): compiles, not every file touched
    Mutant(
        "census-rewritten-counted-as-compile",
        "servebuild/tools/servebuild_cache.py",
        "    if not existed or name.endswith(BINARY_PRODUCTS):",
        "    if True:",
        (
            f"{CENSUS}::test_flashinfers_log_and_inductors_entries_rewritten_on_load_are_no_compile",
            f"{CENSUS}::test_a_warm_start_on_the_h200_counts_the_kernels_it_compiled_and_not_the_config_inductor_rewrote",
        ),
    ),
    Mutant(
        "census-binary-rebuilt-not-compile",
        "servebuild/tools/servebuild_cache.py",
        "    if not existed or name.endswith(BINARY_PRODUCTS):",
        "    if not existed:",
        (f"{CENSUS}::test_a_module_rebuilt_in_place_is_a_compile",),
    ),
    Mutant(
        "census-log-counted",
        "servebuild/tools/servebuild_cache.py",
        '    if name.endswith(".log") or ".log." in name:\n        return "logs"',
        '    if False:\n        return "logs"',
        (f"{CENSUS}::test_flashinfers_log_and_inductors_entries_rewritten_on_load_are_no_compile",),
    ),
    Mutant(
        "census-rotated-log-counted",
        "servebuild/tools/servebuild_cache.py",
        '    if name.endswith(".log") or ".log." in name:',
        '    if name.endswith(".log"):',
        (f"{CENSUS}::test_a_rotated_log_is_a_log_not_a_compile",),
    ),
    Mutant(
        "census-locks-counted",
        "servebuild/tools/servebuild_cache.py",
        '    if name.endswith(".lock") or size == 0:',
        "    if False:",
        (f"{CENSUS}::test_new_products_are_counted_per_file_and_kind_and_locks_are_not",),
    ),
    Mutant(
        "census-counts-kinds-not-files",
        "servebuild/tools/servebuild_cache.py",
        "out[what][kind_of(rel)] = out[what].get(kind_of(rel), 0) + 1",
        "out[what][kind_of(rel)] = 1",
        (f"{CENSUS}::test_new_products_are_counted_per_file_and_kind_and_locks_are_not",),
    ),
    Mutant(
        "census-unchanged-counted",
        "servebuild/tools/servebuild_cache.py",
        "        if before.get(rel) == stamp:\n            continue",
        "        if False:\n            continue",
        (f"{CENSUS}::test_a_start_that_wrote_nothing_counts_nothing",),
    ),
    # the settled step (servebuild/render/settle.py)
    Mutant(
        "settle-step-time-fixed",
        "servebuild/render/settle.py",
        "export {STEP_TIME}=$(( newest + 1 > {TAR_MTIME} ? newest + 1 : {TAR_MTIME} ))",
        "export {STEP_TIME}={TAR_MTIME}",
        (f"{SETTLE}::test_the_settled_step_really_settles",),
        "the old settle: every output at 2000-01-01, older than the headers it was built from",
    ),
    Mutant(
        "settle-step-time-no-floor",
        "servebuild/render/settle.py",
        "newest + 1 > {TAR_MTIME} ? newest + 1 : {TAR_MTIME}",
        "newest + 1",
        (f"{SETTLE}::test_the_settled_step_really_settles",),
    ),
    Mutant(
        "settle-logs-kept",
        "servebuild/render/settle.py",
        'SETTLE_PARTS = (\n    f"find /var/log /var/cache/ldconfig -xdev -type f -newer {MARK} -exec truncate -s 0 {{}} +",',
        'SETTLE_PARTS = (\n    "true",',
        (f"{SETTLE}::test_the_settled_step_empties_the_logs_it_wrote",),
    ),
    Mutant(
        "settle-newest-walked-every-step",
        "servebuild/render/settle.py",
        "if [ -f {NEWEST} ]; then",
        "if false; then",
        (f"{SETTLE}::test_the_newest_time_is_carried_from_step_to_step",),
        "the old start: every settled step walks /usr and /opt again (0.6-0.9 s a step on SGLang)",
    ),
    Mutant(
        "settle-newest-misses-older-files",
        "servebuild/render/settle.py",
        "-newer {REF} \\\\( -path",
        "-newer {REF} -false \\\\( -path",
        (f"{SETTLE}::test_the_newest_time_is_carried_from_step_to_step",),
        "a file a step put under /usr with an older time still newer than the carried one is missed",
    ),
    Mutant(
        "settle-no-wait-past-the-marker",
        "servebuild/render/settle.py",
        "until touch {PROBE} && [",
        "until touch {PROBE} || [",
        (f"{SETTLE}::test_what_the_command_writes_in_the_markers_clock_tick_is_newer_than_the_marker",),
        "the start of the settle reverted on 2026-12-07: a file made in the marker's clock tick kept its real time",
    ),
    Mutant(
        "settle-no-tmp-tmpfs",
        "servebuild/render/settle.py",
        'MOUNTS = f"{TMP} {MNT} {WRAPPER_BIND}"',
        'MOUNTS = f"{MNT} {WRAPPER_BIND}"',
        (f"{SETTLE}::test_a_run_keeps_its_flags_and_runs_its_command_between_marker_and_settle",),
    ),
    Mutant(
        "settle-bind-anywhere",
        "servebuild/render/settle.py",
        '        if not target.startswith(MOUNT_ROOT + "/"):',
        "        if False:",
        (f"{SETTLE}::test_what_cannot_be_settled_is_refused",),
    ),
    Mutant(
        "settle-add-into-tmp-allowed",
        "servebuild/render/settle.py",
        'elif keyword == "ADD" and _dest(instruction).startswith("/tmp"):',
        "elif False:",
        (f"{SETTLE}::test_what_cannot_be_settled_is_refused",),
    ),
    Mutant(
        "settle-copy-into-tmp-allowed",
        "servebuild/render/settle.py",
        '    if dest.startswith("/tmp"):\n        raise SettleError',
        "    if False:\n        raise SettleError",
        (f"{SETTLE}::test_what_cannot_be_settled_is_refused",),
    ),
    Mutant(
        "settle-copy-dirs-keep-context-time",
        "servebuild/render/settle.py",
        '[ "$from" = stage ] || find',
        "true || find",
        (f"{SETTLE}::test_a_copy_into_a_directory_runs_as_copy_would",),
    ),
    # the in-image cache tool's seed and census (servebuild/tools/servebuild_cache.py)
    Mutant(
        "seed-rewrites-origin",
        "servebuild/tools/servebuild_cache.py",
        "            if origin is None:\n                text = json.dumps",
        "            if True:\n                text = json.dumps",
        (
            f"{CONFINED}::test_a_second_seed_does_not_rewrite_the_origin_it_wrote",
            f"{CONFINED}::test_seed_keeps_an_origin_from_another_image_and_warm_still_refuses_the_cache",
        ),
    ),
    Mutant(
        "seed-overwrites-the-volume",
        "servebuild/tools/servebuild_cache.py",
        "        elif not exists_at(entry.name, dir_fd):  # never overwrites",
        "        elif True:  # never overwrites",
        ("tests/unit/test_aot.py::test_the_cache_tool_seeds_only_what_is_missing_and_packs_only_what_a_run_added",),
    ),
    Mutant(
        "seed-copies-a-link-out",
        "servebuild/tools/servebuild_cache.py",
        'if os.path.isabs(text) or lexical.split(os.sep)[0] == ".." or not within(os.path.realpath(path), root):',
        "if False:",
        (f"{CONFINED}::test_seed_copies_a_link_inside_the_seed_as_a_link_and_skips_one_that_leaves_it",),
    ),
    Mutant(
        "seed-leaves-temp-file",
        "servebuild/tools/servebuild_cache.py",
        "            os.unlink(temp, dir_fd=dir_fd)",
        "            pass",
        (f"{CONFINED}::test_a_write_that_fails_mid_seed_leaves_no_temp_file",),
    ),
    Mutant(
        "census-skips-unreadable-dir",
        "servebuild/tools/servebuild_cache.py",
        "def unreadable(exc: OSError) -> None:\n    raise exc",
        "def unreadable(exc: OSError) -> None:\n    return None",
        (f"{CONFINED}::test_census_and_pack_name_a_directory_they_cannot_read",),
    ),
    # bisect's search and its verdict (servebuild/check/bisect.py)
    Mutant(
        "bisect-threshold-strict",
        "servebuild/check/bisect.py",
        'return "pass" if value >= threshold else "fail"',
        'return "pass" if value > threshold else "fail"',
        (t("test_a_metric_exactly_at_the_threshold_passes", BISECT),),
    ),
    Mutant(
        "bisect-non-number-metric-compared",
        "servebuild/check/bisect.py",
        '    if not isinstance(value, (int, float)):\n        return "no-metric"',
        '    if value is None:\n        return "no-metric"',
        (t("test_a_metric_exactly_at_the_threshold_passes", BISECT),),
    ),
    Mutant(
        "bisect-no-change-names-a-culprit",
        "servebuild/check/bisect.py",
        "    if lo == 0 and result(0) == top:\n        return None",
        "    if False:\n        return None",
        (t("test_the_search_finds_the_first_prefix_whose_outcome_differs", BISECT),),
    ),
    Mutant(
        "bisect-search-wrong-half",
        "servebuild/check/bisect.py",
        "        if result(mid) == top:\n            hi = mid",
        "        if result(mid) != top:\n            hi = mid",
        (t("test_the_search_finds_the_first_prefix_whose_outcome_differs", BISECT),),
    ),
    Mutant(
        "bisect-nan-threshold-taken",
        "servebuild/check/bisect.py",
        '    if not math.isfinite(value):\n        raise InputError(f"{threshold!r} is not a finite number"',
        '    if False:\n        raise InputError(f"{threshold!r} is not a finite number"',
        (t("test_bisect_options_are_checked_before_anything_builds", BISECT),),
    ),
    Mutant(
        "bisect-zero-timeout-taken",
        "servebuild/check/bisect.py",
        "        if self.timeout_s <= 0:",
        "        if self.timeout_s < 0:",
        (t("test_bisect_options_are_checked_before_anything_builds", BISECT),),
    ),
    # the bench client (servebuild/tools/bench_client.py, servebuild_bench.py)
    Mutant(
        "bench-cr-alone-not-a-line-end",
        "servebuild/tools/bench_client.py",
        '_EOL = re.compile(rb"\\r\\n|\\r|\\n")',
        '_EOL = re.compile(rb"\\r\\n|\\n")',
        (
            f"{WIRE}::test_every_sse_line_ending_is_read",
            f"{WIRE}::test_sse_lines_splits_on_every_ending_and_bounds_a_line",
        ),
    ),
    Mutant(
        "bench-split-crlf-two-endings",
        "servebuild/tools/bench_client.py",
        '        if after_cr and data.startswith(b"\\n"):\n            data = data[1:]',
        "        if False:\n            data = data[1:]",
        (
            f"{WIRE}::test_a_crlf_split_across_two_writes_is_one_line_ending",
            f"{WIRE}::test_sse_lines_splits_on_every_ending_and_bounds_a_line",
        ),
        "over TCP the extra empty line does not change the count; sse_lines itself shows it",
    ),
    Mutant(
        "bench-line-unbounded",
        "servebuild/tools/bench_client.py",
        "        if len(buf) > limit and len(_EOL.split(buf, 1)[0]) > limit:",
        "        if False:",
        (
            f"{WIRE}::test_a_line_over_the_limit_is_one_error",
            f"{WIRE}::test_sse_lines_splits_on_every_ending_and_bounds_a_line",
        ),
    ),
    Mutant(
        "bench-url-control-char-taken",
        "servebuild/tools/servebuild_bench.py",
        "        if not value.isprintable():",
        "        if False:",
        (f"{WIRE}::test_a_url_or_model_with_a_line_break_is_one_line",),
    ),
    Mutant(
        "bench-out-written-in-place",
        "servebuild/tools/servebuild_bench.py",
        '        with open(tmp, "x", encoding="utf-8") as fh:\n            fh.write(text)\n        os.replace(tmp, path)',
        '        with open(path, "w", encoding="utf-8") as fh:\n            fh.write(text)',
        ("tests/cli/test_bench_out_full.py",),
    ),
    # issue 30: what a variant shares with its release, and the one-import profile check
    Mutant(
        "reuse-native-files-ignored",
        "servebuild/render/reuse.py",
        "f for f in installed if is_native(f) or _covered(installed[f], kind.kernel_inputs)",
        "f for f in installed if _covered(installed[f], kind.kernel_inputs)",
        (f"{REUSE}::test_a_kernel_source_or_any_native_file_gets_its_own_kernels",),
    ),
    Mutant(
        "reuse-folder-prefix-matches-any-start",
        "servebuild/render/reuse.py",
        '(p.endswith("/") and site.startswith(p))',
        "site.startswith(p)",
        (REUSE,),
        "sglang/srt/server_args.py would then cover sglang/srt/server_args_extra.py too",
    ),
    Mutant(
        "reuse-parser-rule-dropped",
        "servebuild/render/reuse.py",
        "read = [f for f in sorted(installed) if _covered(installed[f], kind.parser_inputs)]",
        "read = []",
        (
            f"{REUSE}::test_a_file_the_parser_reads_gets_its_own_profile_check",
            f"{REUSE}::test_the_adaptive_prefill_patch_shares_the_kernels_but_is_parsed_by_its_own_engine",
        ),
    ),
    Mutant(
        "reuse-unknown-files-shared",
        "servebuild/render/reuse.py",
        "    if overlay_files is None:\n        why",
        "    if overlay_files is None:\n        overlay_files = []\n    if False:\n        why",
        (f"{REUSE}::test_unknown_files_and_a_mode_without_a_release_engine_share_nothing",),
    ),
    Mutant(
        "reuse-site-path-unstripped",
        "servebuild/modes/wheel_overlay.py",
        "return path[len(parent) + 1 :] if parent else path",
        "return path",
        (REUSE,),
    ),
    Mutant(
        "aot-spec-names-the-built-recipe",
        "servebuild/render/context.py",
        "aot_spec(recipe, kernels, aot_owner(loaded))",
        "aot_spec(recipe, kernels, recipe.name)",
        (f"{REUSE}::test_a_recipe_extending_another_without_touching_aot_shares_its_aot_spec",),
    ),
    Mutant(
        "argcheck-child-env-not-its-own",
        "servebuild/tools/profile_check.py",
        '        env = {k: v for k, v in record["env"].items() if k not in SKIP_ENV}\n        os.environ.clear()\n',
        "        env = {}\n",
        (f"{ONEIMPORT}::test_each_profile_parses_under_its_own_environment",),
    ),
    Mutant(
        "argcheck-other-python-forms-replayed",
        "servebuild/tools/profile_check.py",
        '    elif not argv[1].startswith("-") and os.path.isfile(argv[1]):',
        '    elif "-m" in argv:\n        i = argv.index("-m")\n        record["run"] = ("module", argv[i + 1], argv[i + 2:])\n'
        '    elif not argv[1].startswith("-") and os.path.isfile(argv[1]):',
        (f"{ONEIMPORT}::test_a_launcher_that_starts_python_another_way_is_run_whole",),
    ),
    Mutant(
        "argcheck-fell-off-the-end-passes",
        "servebuild/tools/profile_check.py",
        "        os._exit(4)",
        "        os._exit(0)",
        (f"{ONEIMPORT}::test_a_server_that_never_parses_is_a_finding_not_a_pass",),
        "a child that never reached the parser writes no outcome: judged as exited either way",
    ),
    # issue 45, item 7: the held-out survivors of the round at 5d49d2d, weakest modules first
    # build/committed.py: the committed-digest verdict and the file it reads
    Mutant(
        "committed-match-by-layers",
        "servebuild/build/committed.py",
        "    if committed.image == image_id:",
        "    if layers == committed.layers:",
        (f"{IDS}::test_the_same_layers_under_another_image_id_do_not_match",),
    ),
    Mutant(
        "committed-layer-count-unchecked",
        "servebuild/build/committed.py",
        "    if len(layers) != len(committed.layers):",
        "    if False:",
        (f"{IDS}::test_a_layer_count_that_differs_is_named_when_every_shared_layer_is_the_same",),
    ),
    Mutant(
        "committed-unknown-keys-allowed",
        "servebuild/build/committed.py",
        'model_config = ConfigDict(extra="forbid", frozen=True, strict=True)',
        'model_config = ConfigDict(extra="ignore", frozen=True, strict=True)',
        (f"{IDS}::test_a_malformed_entry_is_one_line_naming_its_field",),
    ),
    Mutant(
        "committed-layer-digests-unchecked",
        "servebuild/build/committed.py",
        "bad = next((x for x in v if not DIGEST.fullmatch(x)), None)",
        "bad = None",
        (f"{IDS}::test_a_malformed_entry_is_one_line_naming_its_field",),
    ),
    Mutant(
        "committed-image-digest-prefix",
        "servebuild/build/committed.py",
        "if v is not None and not DIGEST.fullmatch(v):",
        "if v is not None and not DIGEST.match(v):",
        (f"{IDS}::test_a_malformed_entry_is_one_line_naming_its_field",),
    ),
    Mutant(
        "committed-layer-digest-prefix",
        "servebuild/build/committed.py",
        "bad = next((x for x in v if not DIGEST.fullmatch(x)), None)",
        "bad = next((x for x in v if not DIGEST.match(x)), None)",
        (f"{IDS}::test_a_malformed_entry_is_one_line_naming_its_field",),
    ),
    Mutant(
        "committed-ids-file-links-out",
        "servebuild/build/committed.py",
        "    check_link_inside(path, loaded.root)\n",
        "",
        (f"{IDS}::test_an_ids_file_linking_out_of_the_project_is_refused",),
    ),
    Mutant(
        "committed-record-drops-other-platforms",
        "servebuild/build/committed.py",
        "data = {p: e.model_dump(exclude_none=True) for p, e in load_committed(loaded).items()}",
        "data = {}",
        (f"{IDS}::test_record_keeps_every_other_platform_and_variant",),
    ),
    Mutant(
        "committed-not-a-mapping-taken",
        "servebuild/build/committed.py",
        '    if not isinstance(data, dict):\n        raise InputError("malformed ids file',
        '    if False:\n        raise InputError("malformed ids file',
        (f"{IDS}::test_an_ids_file_that_is_not_a_mapping_is_one_line",),
    ),
    Mutant(
        "committed-ids-read-after-the-build",
        "servebuild/cli/build.py",
        "        if not plan.options.stack:  # a malformed ids file",
        "        if False:  # a malformed ids file",
        (f"{IDS}::test_build_refuses_a_malformed_ids_file_before_building",),
    ),
    Mutant(
        "committed-main-reads-ids-after-bootstrap",
        "servebuild/cli/build.py",
        "    committed.load_committed(loaded)  # a malformed ids file",
        "    pass  # a malformed ids file",
        (f"{IDS}::test_main_refuses_a_malformed_ids_file_before_bootstrapping_a_base",),
    ),
    # lock/debian.py, sources/debs.py, sources/rootfs.py, build/bases.py
    Mutant(
        "debian-suite-prefix",
        "servebuild/lock/debian.py",
        "        if not SUITE.fullmatch(v):",
        "        if not SUITE.match(v):",
        (f"{DEBH}::test_a_suite_is_matched_whole_not_as_a_prefix",),
    ),
    Mutant(
        "base-suite-prefix",
        "servebuild/build/bases.py",
        "    if not SUITE.fullmatch(suite):",
        "    if not SUITE.match(suite):",
        (f"{DEBH}::test_a_suite_is_matched_whole_not_as_a_prefix",),
    ),
    Mutant(
        "minbase-suite-prefix",
        "servebuild/lock/debian.py",
        "?or(?archive(^{suite}$),?codename(^{suite}$))",
        "?or(?archive(^{suite}),?codename(^{suite}))",
        (f"{DEBH}::test_the_minbase_patterns_anchor_the_suite",),
    ),
    Mutant(
        "debian-file-mirror-accepted",
        "servebuild/lock/debian.py",
        '        if not re.fullmatch(r"https?://',
        '        if not re.search(r"https?://',
        (f"{DEBH}::test_a_mirror_is_an_http_url_whole",),
    ),
    Mutant(
        "relock-rollback-check-skipped",
        "servebuild/lock/debian.py",
        "not_before=prior.release if prior and prior.suite == suite else None,",
        "not_before=None,",
        (f"{DEBH}::test_a_re_lock_against_a_rolled_back_mirror_is_refused_not_left_unresolved",),
    ),
    Mutant(
        "rolled-back-mirror-unresolved",
        "servebuild/lock/debian.py",
        "    if locked is not None and release.epoch < locked.epoch:\n        raise Refused(",
        "    if locked is not None and release.epoch < locked.epoch:\n        raise HostError(",
        (f"{DEBH}::test_a_re_lock_against_a_rolled_back_mirror_is_refused_not_left_unresolved",),
    ),
    Mutant(
        "unrequested-paragraphs-kept",
        "servebuild/lock/debian.py",
        "if key in set(wanted) and key not in found:",
        "if key not in found:",
        (f"{DEBH}::test_paragraphs_apt_cache_shows_that_were_not_asked_for_are_not_pins",),
    ),
    Mutant(
        "deb-version-not-compared",
        "servebuild/sources/debs.py",
        "            pkg.name,\n            pkg.version,\n            pkg.arch,",
        '            pkg.name,\n            fields.get("Version"),\n            pkg.arch,',
        (f"{DEBH}::test_a_deb_whose_own_version_is_not_the_pin_is_refused",),
    ),
    Mutant(
        "deb-limit-raised-1000-fold",
        "servebuild/sources/debs.py",
        "DEB_LIMIT = 1 << 30",
        "DEB_LIMIT = 1000 << 30",
        (f"{DEBH}::test_a_deb_of_more_than_1_gib_is_not_a_pin", f"{DEBH}::test_a_download_is_bounded_at_1_gib"),
    ),
    Mutant(
        "deb-download-unbounded",
        "servebuild/sources/debs.py",
        "mirror_reads.get(url, DEB_LIMIT, sink=sink)",
        "mirror_reads.get(url, 1 << 40, sink=sink)",
        (f"{DEBH}::test_a_download_is_bounded_at_1_gib",),
    ),
    Mutant(
        "any-dpkg-status-installed",
        "servebuild/sources/rootfs.py",
        'if para.get("Status", "").endswith(" installed"):',
        'if para.get("Status", "").endswith("installed"):',
        (f"{DEBH}::test_only_packages_dpkg_says_are_installed_count",),
    ),
    Mutant(
        "var-log-link-or-device-kept",
        "servebuild/sources/rootfs.py",
        "(member.size > 0 or not member.isreg())",
        "(member.size > 0)",
        (f"{DEBH}::test_var_log_keeps_its_folders_and_empty_files_only",),
    ),
    Mutant(
        "base-lock-of-another-suite-used",
        "servebuild/build/bases.py",
        "    if pins is not None and pins.suite == suite:",
        "    if pins is not None:",
        (f"{DEBH}::test_a_lock_for_another_suite_is_not_used",),
    ),
    # fsutil: the readers' limits at their edges, append mode, FIFOs
    Mutant(
        "fsutil-exact-limit-refused",
        "servebuild/fsutil.py",
        "    if size > limit.max_bytes:",
        "    if size >= limit.max_bytes:",
        (f"{LIMITS_T}::test_a_file_of_exactly_its_limit_is_read_and_one_byte_more_is_not",),
    ),
    Mutant(
        "fsutil-one-byte-over-read",
        "servebuild/fsutil.py",
        "    if size > limit.max_bytes:",
        "    if size > limit.max_bytes + 1:",
        (f"{LIMITS_T}::test_a_file_of_exactly_its_limit_is_read_and_one_byte_more_is_not",),
    ),
    Mutant(
        "fsutil-line-limit-off-by-one",
        "servebuild/fsutil.py",
        "        if lines > limit.max_lines:",
        "        if lines >= limit.max_lines:",
        (f"{LIMITS_T}::test_a_file_of_exactly_the_line_limit_is_read_and_one_line_more_is_not",),
    ),
    Mutant(
        "fsutil-line-limit-one-over-read",
        "servebuild/fsutil.py",
        "        if lines > limit.max_lines:",
        "        if lines > limit.max_lines + 1:",
        (f"{LIMITS_T}::test_a_file_of_exactly_the_line_limit_is_read_and_one_line_more_is_not",),
    ),
    Mutant(
        "fsutil-append-truncates",
        "servebuild/fsutil.py",
        "        if truncate and not append and not exclusive:",
        "        if truncate and not exclusive:",
        (f"{LIMITS_T}::test_append_mode_keeps_what_the_file_held",),
    ),
    Mutant(
        "fsutil-fifo-regular-by-stat",
        "servebuild/fsutil.py",
        '    if not stat.S_ISREG(st.st_mode):\n        raise error(f"is not a regular file ({limit.what})", **place)\n'
        "    _check_size(st.st_size, limit, error, place)\n    return st",
        "    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):\n"
        '        raise error(f"is not a regular file ({limit.what})", **place)\n'
        "    _check_size(st.st_size, limit, error, place)\n    return st",
        (f"{LIMITS_T}::test_a_fifo_is_not_a_regular_file_by_stat",),
    ),
    Mutant(
        "fsutil-fifo-regular-on-the-open-file",
        "servebuild/fsutil.py",
        '        st = os.fstat(fd)\n        if not stat.S_ISREG(st.st_mode):\n            raise error(f"is not a regular',
        "        st = os.fstat(fd)\n        if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):\n"
        '            raise error(f"is not a regular',
        (f"{LIMITS_T}::test_a_fifo_swapped_in_after_the_stat_is_refused_on_the_open_file",),
    ),
    # bench summaries and bisect rows
    Mutant(
        "bench-decode-outputs-always-identical",
        "servebuild/tools/bench_suites.py",
        '"decode_outputs_identical": len({s.text_sha256 for s in got}) == 1}',
        '"decode_outputs_identical": True}',
        (f"{SUMS}::test_decode_outputs_differ_when_one_run_says_something_else",),
    ),
    Mutant(
        "bench-tail-e2e-from-ttft",
        "servebuild/tools/bench_suites.py",
        '**tails("tail_latency_s", [s.latency_s for s in got]),',
        '**tails("tail_latency_s", [s.ttft_s for s in got]),',
        (f"{SUMS}::test_the_tail_e2e_latency_is_the_requests_latency_not_their_ttft",),
    ),
    Mutant(
        "bench-booleans-are-numbers",
        "servebuild/tools/bench_suites.py",
        "        if isinstance(v, (int, float)) and not isinstance(v, bool):",
        "        if isinstance(v, (int, float)):",
        (f"{SUMS}::test_booleans_nan_and_infinities_are_not_numbers_of_a_summary",),
    ),
    Mutant(
        "bench-nan-and-inf-are-numbers",
        "servebuild/tools/bench_suites.py",
        "            if math.isfinite(v):\n                out.append(v)",
        "            if True:\n                out.append(v)",
        (f"{SUMS}::test_booleans_nan_and_infinities_are_not_numbers_of_a_summary",),
    ),
    Mutant(
        "bench-prefill-rate-from-completion-tokens",
        "servebuild/tools/bench_suites.py",
        "[s.prompt_tokens / s.ttft_s for s in got",
        "[(s.completion_tokens or 0) / s.ttft_s for s in got",
        (f"{SUMS}::test_the_prefill_rate_is_prompt_tokens_over_ttft_not_completion_tokens",),
    ),
    Mutant(
        "bisect-spread-for-one-run",
        "servebuild/check/bisect.py",
        "            if len(values) > 1:\n                self.spread[name]",
        "            if len(values) >= 1:\n                self.spread[name]",
        (f"{SUMS}::test_a_one_run_row_has_no_spread_and_two_runs_do",),
    ),
    Mutant(
        "bisect-nan-in-a-median",
        "servebuild/check/bisect.py",
        "and not isinstance(value, bool) and math.isfinite(value)",
        "and not isinstance(value, bool)",
        (f"{SUMS}::test_a_nan_infinite_or_boolean_run_value_is_not_in_the_median",),
    ),
    Mutant(
        "bisect-boolean-in-a-median",
        "servebuild/check/bisect.py",
        "and not isinstance(value, bool) and math.isfinite(value)",
        "and math.isfinite(value)",
        (f"{SUMS}::test_a_nan_infinite_or_boolean_run_value_is_not_in_the_median",),
    ),
    Mutant(
        "bench-cache-hit-threshold-moved",
        "servebuild/tools/bench_suites.py",
        "(f.cached_tokens or 0) > 0.5 * f.prompt_tokens",
        "(f.cached_tokens or 0) > 0.9 * f.prompt_tokens",
        (f"{SUMS}::test_the_nonce_check_calls_a_prompt_cached_past_half_its_tokens_a_hit",),
    ),
    Mutant(
        "bench-cache-hit-at-half",
        "servebuild/tools/bench_suites.py",
        "(f.cached_tokens or 0) > 0.5 * f.prompt_tokens",
        "(f.cached_tokens or 0) >= 0.5 * f.prompt_tokens",
        (f"{SUMS}::test_the_nonce_check_calls_a_prompt_cached_past_half_its_tokens_a_hit",),
    ),
    Mutant(
        "bench-grid-one-prompt-per-stream",
        "servebuild/tools/bench_suites.py",
        "prompts = [run.maker.make(size) for _ in range(max(10, 3 * conc))]",
        "prompts = [run.maker.make(size) for _ in range(conc)]",
        (f"{SUMS}::test_the_grid_sends_three_prompts_per_stream_and_at_least_ten",),
    ),
    # settle, copy-ups, the payload table's conditions, the cache tool's pack and seed
    Mutant(
        "settle-comment-continues",
        "servebuild/render/settle.py",
        'if not line.endswith("\\\\") or line.lstrip().startswith("#"):',
        'if not line.endswith("\\\\"):',
        (f"{SETTLE}::test_a_comment_ending_in_a_backslash_does_not_swallow_the_next_run",),
    ),
    Mutant(
        "settle-touch-follows-links",
        "servebuild/render/settle.py",
        "-newer {MARK} -exec touch -h -d",
        "-newer {MARK} -exec touch -d",
        (f"{SETTLE}::test_the_settle_sets_a_links_own_time_and_leaves_its_target_alone",),
    ),
    Mutant(
        "copyup-owner-ignored",
        "servebuild/build/copyups.py",
        "below.get(path) == (mode, uid, gid, True)",
        "(below.get(path) or (None,))[0] == mode",
        (f"{COPYUPS}::test_a_directory_whose_owner_changed_is_not_named",),
    ),
    Mutant(
        "copyup-direct-parent-only",
        "servebuild/build/copyups.py",
        '            while "/" in path:',
        '            if "/" in path:',
        (f"{COPYUPS}::test_a_change_deep_under_a_directory_keeps_it_off_the_list",),
    ),
    Mutant(
        "copyup-last-layer-only",
        "servebuild/build/copyups.py",
        "        below.update({path: (mode, uid, gid, is_dir) for path, mode, uid, gid, is_dir in entries})",
        "        below = {path: (mode, uid, gid, is_dir) for path, mode, uid, gid, is_dir in entries}",
        (f"{COPYUPS}::test_what_a_directory_was_is_read_from_every_layer_below_not_the_last_alone",),
    ),
    Mutant(
        "payload-profiles-always",
        "servebuild/render/payload.py",
        '"profiles": lambda recipe, has_aot: bool(recipe.launch.profiles),',
        '"profiles": lambda recipe, has_aot: True,',
        (f"{PAYLOAD_T}::test_each_condition_of_the_table_is_what_it_says",),
    ),
    Mutant(
        "payload-argcheck-without-profiles",
        "servebuild/render/payload.py",
        "bool(_kind(recipe) and _kind(recipe).argcheck and recipe.launch.profiles)",
        "bool(_kind(recipe) and _kind(recipe).argcheck)",
        (f"{PAYLOAD_T}::test_each_condition_of_the_table_is_what_it_says",),
    ),
    Mutant(
        "payload-argcheck-without-a-hook",
        "servebuild/render/payload.py",
        "bool(_kind(recipe) and _kind(recipe).argcheck and recipe.launch.profiles)",
        "bool(_kind(recipe) and recipe.launch.profiles)",
        (f"{PAYLOAD_T}::test_an_engine_kind_without_an_argcheck_hook_carries_no_argcheck_row",),
    ),
    Mutant(
        "payload-bench-without-an-engine",
        "servebuild/render/payload.py",
        '"bench": lambda recipe, has_aot: bool(_kind(recipe) and recipe.launch.profiles),',
        '"bench": lambda recipe, has_aot: bool(recipe.launch.profiles),',
        (f"{PAYLOAD_T}::test_each_condition_of_the_table_is_what_it_says",),
    ),
    Mutant(
        "payload-serve-time-jit-any-engine",
        "servebuild/render/payload.py",
        "bool(_kind(recipe) and _kind(recipe).serve_time_jit)",
        "bool(_kind(recipe) and recipe.launch.profiles)",
        (f"{PAYLOAD_T}::test_each_condition_of_the_table_is_what_it_says",),
    ),
    Mutant(
        "payload-aot-always",
        "servebuild/render/payload.py",
        '"aot": lambda recipe, has_aot: has_aot,',
        '"aot": lambda recipe, has_aot: True,',
        (f"{PAYLOAD_T}::test_each_condition_of_the_table_is_what_it_says",),
    ),
    Mutant(
        "cache-pack-limit-exclusive",
        "servebuild/tools/servebuild_cache.py",
        "    if total > max_bytes:",
        "    if total >= max_bytes:",
        (f"{CACHET}::test_pack_takes_a_run_of_exactly_its_limit_and_refuses_one_byte_more",),
    ),
    Mutant(
        "cache-pack-limit-off",
        "servebuild/tools/servebuild_cache.py",
        "    if total > max_bytes:",
        "    if total > max_bytes * 1000:",
        (f"{CACHET}::test_pack_takes_a_run_of_exactly_its_limit_and_refuses_one_byte_more",),
    ),
    Mutant(
        "cache-pack-keeps-owners",
        "servebuild/tools/servebuild_cache.py",
        "        info.uid = info.gid = 0\n",
        "",
        (f"{CACHET}::test_pack_writes_every_file_as_root_s_whoever_owned_it",),
        "needs root to chown (the test is skipped otherwise, and the mutant survives)",
    ),
    Mutant(
        "cache-seed-modes-dropped",
        "servebuild/tools/servebuild_cache.py",
        "            os.fchmod(out.fileno(), st.st_mode & 0o7777)\n",
        "",
        (f"{CACHET}::test_seed_keeps_each_file_s_mode",),
    ),
    # item 6: the image's info tool
    Mutant(
        "info-fifo-waited-on",
        "servebuild/tools/servebuild_info.py",
        "fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)",
        "fd = os.open(path, os.O_RDONLY)",
        (f"{INFO}::test_a_fifo_or_a_directory_is_refused_without_waiting",),
    ),
    Mutant(
        "info-escapes-printed-raw",
        "servebuild/tools/servebuild_info.py",
        'return "\\n".join(shown(line) for line in lines)',
        'return "\\n".join(lines)',
        (f"{INFO}::test_no_control_or_format_character_of_a_manifest_is_printed_raw",),
    ),
    Mutant(
        "info-list-taken-for-an-object",
        "servebuild/tools/servebuild_info.py",
        '        if not isinstance(value, dict):\n            self.fail(field, f"is {_kind(value)}, not an object")',
        '        if False:\n            self.fail(field, f"is {_kind(value)}, not an object")',
        (f"{INFO}::test_a_manifest_field_of_the_wrong_kind_is_one_line_naming_it",),
    ),
    Mutant(
        "info-long-text-taken",
        "servebuild/tools/servebuild_info.py",
        "        if len(value) > MAX_TEXT:",
        "        if False:",
        (f"{INFO}::test_deep_nesting_and_huge_or_non_finite_values_are_one_line",),
    ),
    Mutant(
        "info-nan-taken",
        "servebuild/tools/servebuild_info.py",
        'data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)',
        'data = json.loads(raw.decode("utf-8"))',
        (f"{INFO}::test_deep_nesting_and_huge_or_non_finite_values_are_one_line",),
    ),
]


def tree_files(root: Path) -> list[str]:
    out = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    return [f for f in out if f and (root / f).is_file() and not (root / f).is_symlink()]


def copy_tree(root: Path, dest: Path) -> None:
    for rel in tree_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)


def pytest(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[bool, str, float]:
    """Run each test spec ("FILE::NAME" or "FILE -k EXPR") on its own; (all passed, first failure, seconds).
    Only pytest's "tests failed" (exit 1) counts as a failure: a spec that collects nothing (5), a usage
    or collection error (4, 2) is a broken spec, reported as such, never as a kill."""
    start = time.monotonic()
    for spec in tests:
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--no-header", *shlex.split(spec)]
        try:
            proc = subprocess.run(
                cmd,
                cwd=tree,
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, "HYPOTHESIS_PROFILE": "mutants"},
            )
        except subprocess.TimeoutExpired:
            return False, f"timed out ({spec})", time.monotonic() - start
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode not in (0, 1):
            raise SystemExit(f"broken test spec {spec!r}: pytest exit {proc.returncode}: {(lines or [''])[-1]}")
        if proc.returncode == 1:
            failed = next((line for line in lines if line.startswith(("FAILED", "ERROR"))), lines[-1] if lines else "")
            return False, failed, time.monotonic() - start
    return True, "", time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("words", nargs="*", help="only the mutants whose id contains one of these")
    parser.add_argument("--list", action="store_true", help="print the table and stop")
    parser.add_argument("--baseline", action="store_true", help="run each mutant's tests on the real code first")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per mutant's tests (default 300)")
    parser.add_argument("--engine", action="store_true", help="also the mutants whose tests need a Docker engine")
    args = parser.parse_args()
    chosen = [
        m for m in MUTANTS if (not args.words or any(w in m.id for w in args.words)) and (args.engine or not m.engine)
    ]
    if args.list:
        for m in chosen:
            print(f"{m.id:32} {m.file}\n    - {m.old!r}\n    + {m.new!r}\n    tests: {' '.join(m.tests)}")
        return 0
    killed, survived, stale = [], [], []
    with tempfile.TemporaryDirectory(prefix="servebuild-mutants-") as tmp:
        tree = Path(tmp) / "tree"
        copy_tree(ROOT, tree)
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; sys.path.insert(0, 'tests'); import conftest, servebuild; print(servebuild.__file__)",
            ],
            cwd=tree,
            capture_output=True,
            text=True,
        )
        if not probe.stdout.strip().startswith(str(tree)):
            print(f"the copy's servebuild is not the one imported: {probe.stdout.strip() or probe.stderr.strip()}")
            return 1
        for m in chosen:
            path = tree / m.file
            original = path.read_text()
            if not can_be_made(m, original):
                stale.append(m)
                print(f"STALE     {m.id}: {m.old!r} occurs {original.count(m.old)} times in {m.file}")
                continue
            if args.baseline:
                ok, line, secs = pytest(tree, m.tests, args.timeout)
                if not ok:
                    stale.append(m)
                    print(f"STALE     {m.id}: its tests fail on the real code: {line}")
                    continue
            path.write_text(original.replace(m.old, m.new))
            try:
                passed, line, secs = pytest(tree, m.tests, args.timeout)
            finally:
                path.write_text(original)
            (survived if passed else killed).append(m)
            print(f"{'SURVIVED' if passed else 'killed  '}  {m.id:32} {secs:5.1f}s  {'' if passed else line}")
    total = len(killed) + len(survived)
    plain = [m for m in killed + survived if not m.engine]
    if args.engine and len(plain) != total:
        n = sum(1 for m in killed if not m.engine)
        print(f"\nwithout an engine: killed {n} of {len(plain)} ({100 * n / max(len(plain), 1):.0f} %)")
    print(
        f"\nkilled {len(killed)} of {total} ({100 * len(killed) / max(total, 1):.0f} %)"
        + (f"; survived: {', '.join(m.id for m in survived)}" if survived else "")
        + (f"; stale (not counted): {', '.join(m.id for m in stale)}" if stale else "")
    )
    return 0 if not survived and not stale else 1


if __name__ == "__main__":
    sys.exit(main())
