"""SGLang 0.5.16's DSpark verify-pad defect (issue 43): a DSpark profile that verifies more than 4 tokens
per step is refused on 0.5.16-0.5.17 unless the patch stack fixes `sglang-dsv4-verify-pad`; the number
of verify tokens is read the way SGLang's own speculative hook resolves it; the local backport itself
is checked against the 0.5.16 source it patches."""

from __future__ import annotations

import pytest

from servebuild.engines.profiles import LaunchProfile
from servebuild.engines.sglang import KIND
from support import REPO_ROOT

FIX = "sglang-dsv4-verify-pad"


def dspark(*args: str, block=5) -> LaunchProfile:
    return LaunchProfile(
        module="sglang.launch_server",
        dspark_block_size=block,
        args=["--model-path", "/m", "--speculative-algorithm", "DSPARK", *args],
    )


@pytest.mark.parametrize(
    "args,verify,source",
    [
        ((), 6, "the checkpoint's block size 5 + 1"),
        (("--speculative-num-draft-tokens", "6"), 6, "--speculative-num-draft-tokens 6"),
        (("--speculative-num-draft-tokens=5",), 5, "--speculative-num-draft-tokens 5"),
        (("--speculative-dspark-block-size", "4"), 5, "--speculative-dspark-block-size 4 + 1"),
        # argparse's abbreviation of the flag is the flag
        (("--speculative-num-draft", "8"), 8, "--speculative-num-draft-tokens 8"),
    ],
)
def test_more_than_four_verify_tokens_on_0516_without_the_fix_is_refused(args, verify, source):
    with pytest.raises(ValueError) as info:
        KIND.check_defects("p", dspark(*args), "0.5.16", frozenset())
    line = str(info.value)
    assert line.startswith(f"profile 'p': DSpark verifies {verify} tokens ({source}) on sglang 0.5.16, ")
    assert "kMaxMTPDraftTokens = 4" in line and "#34189" in line and "patches/sglang-dsv4-verify-pad.patch" in line
    assert "\n" not in line


@pytest.mark.parametrize(
    "args,block,version,fixed",
    [
        ((), 5, "0.5.16", frozenset({FIX})),  # the stack carries the fix
        ((), 5, "0.5.18", frozenset()),  # fixed upstream
        ((), 5, "0.6.0", frozenset()),
        ((), 3, "0.5.16", frozenset()),  # a checkpoint block of 3 verifies 4
        (("--speculative-num-draft-tokens", "4"), 5, "0.5.16", frozenset()),
        (("--speculative-dspark-block-size", "3"), 5, "0.5.16", frozenset()),
        ((), 5, "0.5.15", frozenset()),  # before DSpark: not this defect's
    ],
)
def test_four_or_fewer_tokens_a_fixed_stack_or_another_release_pass(args, block, version, fixed):
    KIND.check_defects("p", dspark(*args, block=block), version, fixed)


def test_0517_is_still_affected():
    with pytest.raises(ValueError, match="on sglang 0.5.17"):
        KIND.check_defects("p", dspark(), "0.5.17", frozenset())


def test_a_profile_without_dspark_is_not_held_to_the_rule():
    eagle = LaunchProfile(module="sglang.launch_server", args=["--speculative-algorithm", "EAGLE"])
    KIND.check_defects("p", eagle, "0.5.16", frozenset())
    plain = LaunchProfile(module="sglang.launch_server", args=["--speculative-num-draft-tokens", "8"])
    KIND.check_defects("p", plain, "0.5.16", frozenset())


def test_another_fix_does_not_lift_it():
    with pytest.raises(ValueError):
        KIND.check_defects("p", dspark(), "0.5.16", frozenset({"sglang-something-else"}))


def test_the_backport_removes_the_clamp_and_sizes_the_pad_from_the_ring():
    """What the local patch changes, read from the patch itself: the clamp at 4 goes, the pad is the ring
    beyond one window, and the Python side refuses a verify length the rings cannot hold."""
    text = (REPO_ROOT / "patches/sglang-dsv4-verify-pad.patch").read_text()
    removed = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    added = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert "constexpr int32_t kMaxMTPDraftTokens = 4;" in removed
    assert "const auto mtp_pad = std::max<int32_t>(ring_size - window_size, 0);" in added
    assert not any("kMaxMTPDraftTokens" in a for a in added)
    assert any(a.startswith("def check_verify_tokens_fit_the_rings") for a in added)


def _ring_check():
    """check_verify_tokens_fit_the_rings as the patch adds it, executed on its own (plain Python)."""
    text = (REPO_ROOT / "patches/sglang-dsv4-verify-pad.patch").read_text()
    lines, inside = [], False
    for ln in text.splitlines():
        if ln.startswith("+def check_verify_tokens_fit_the_rings"):
            inside = True
        elif inside and not ln.startswith("+"):
            break
        if inside:
            lines.append(ln[1:])
    scope: dict = {}
    exec("\n".join(lines), scope)  # the patch's own function, no engine needed
    return scope["check_verify_tokens_fit_the_rings"]


def test_the_backports_ring_check_admits_six_and_refuses_nine():
    check = _ring_check()
    rings = {4: 16, 128: 256}  # 0.5.16's get_compress_state_ring_size with speculation
    for verify in (2, 4, 6, 8):
        check(verify, rings)
    with pytest.raises(ValueError, match="9 verify tokens needs a C4 state ring of at least 17 .it is 16.; use"):
        check(9, rings)
    check(64, {4: 1, 128: 1})  # online C128 keeps no ring: nothing to check
