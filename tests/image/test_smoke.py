"""Smoke checks: is this image (or host) what its recipe says, before a 155 GiB model is loaded?

Each check is one test with a message a user can act on. Expectations come from the recipe and
the build manifest (see `invoke test-image`); nothing here needs network on the host under test.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest

# torch minor -> the torchvision minor built against it (the pairs PyTorch releases together)
TORCHVISION_FOR_TORCH = {"2.9": "0.24", "2.10": "0.25", "2.11": "0.26", "2.12": "0.27", "2.13": "0.28", "2.14": "0.29"}
BAD_NVCC = re.compile(r"^13\.[123]\b")


def lines_of(result) -> str:
    return (result.stdout + result.stderr).strip()


def pytest_generate_tests(metafunc):
    path = metafunc.config.getoption("--expect")
    data = json.loads(open(path).read()) if path else {}
    for name, key in (
        ("module", "imports"),
        ("dist", "versions"),
        ("arch_module", "arch_modules"),
        ("profile", "profiles"),
        ("cache_dir", "cache_dirs"),
        ("entrypoint", "entrypoints"),
        ("cache_var", "cache_env"),
        ("gpu_module", "gpu_imports"),
    ):
        if name in metafunc.fixturenames:
            values = data.get(key) or []
            values = sorted(values) if isinstance(values, dict) else values
            metafunc.parametrize(
                name, values or [pytest.param(None, marks=pytest.mark.skip(reason=f"the recipe declares no {key}"))]
            )


# ------------------------------------------------------------------ imports and versions

MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def checked_module(name: str) -> str:
    """Expectations can come from a file: only a dotted module name may reach `import` on the host."""
    assert MODULE_NAME.fullmatch(name), f"{name!r} is not a dotted module name; refusing to run it"
    return name


def test_import(py, module):
    result = py(f"import {checked_module(module)}")
    assert result.rc == 0, f"`import {module}` failed: {lines_of(result).splitlines()[-1:]}"


def test_version(py, expect, dist):
    want = expect["versions"][dist]
    result = py(f"import importlib.metadata as m; print(m.version({dist!r}))")
    assert result.rc == 0, f"{dist} is not installed ({lines_of(result).splitlines()[-1:]})"
    got = result.stdout.strip().split("+")[0]
    assert got == want, f"{dist} is {result.stdout.strip()}, the recipe pins {want}"
    engine = expect.get("engine") or {}
    if dist == engine.get("dist") and engine.get("installed_version"):
        got, want = result.stdout.strip(), engine["installed_version"]
        # the engine may append its own label (vLLM adds "precompiled"); ours must be there, unchanged
        if "+" in want:
            ok = got == want or got.startswith(want + ".")
        else:
            ok = got == want or (got.startswith(want + "+") and not got.split("+", 1)[1].startswith("sb"))
        assert ok, (
            f"{dist} reports {result.stdout.strip()}, the manifest says the patched engine is "
            f"{engine['installed_version']}: the patch stack is not what was installed"
        )


def test_torch_cuda_version(py, expect):
    if not expect.get("cuda"):
        pytest.skip("the recipe declares no CUDA version")
    result = py("import torch; print(torch.version.cuda)")
    assert result.rc == 0, f"cannot import torch: {lines_of(result).splitlines()[-1:]}"
    assert result.stdout.strip() == expect["cuda"], (
        f"torch.version.cuda is {result.stdout.strip()}, the recipe wants {expect['cuda']}"
    )


def test_cuda_toolkit_is_13_0(host, py, expect):
    """nvcc 13.1-13.3 miscompile DSV4 top-k on sm_90a (SGLang #34167): the toolkit must be 13.0.x."""
    if not expect.get("cuda"):
        pytest.skip("the recipe declares no CUDA version")
    found = {}
    nvcc = host.run("nvcc --version")
    if nvcc.rc == 0:
        m = re.search(r"release (\d+\.\d+)", nvcc.stdout)
        found["nvcc"] = m.group(1) if m else "?"
    runtime = py(
        "import importlib.metadata as m\nfor d in ('nvidia-cuda-runtime', 'nvidia-cuda-runtime-cu13', "
        "'nvidia-cuda-nvcc'):\n    try: print(d, m.version(d))\n    except Exception: pass"
    )
    for line in runtime.stdout.splitlines():
        name, version = line.split()
        found[name] = version
    assert found, "no CUDA toolkit found (no nvcc, no nvidia-cuda-runtime wheel)"
    for what, version in found.items():
        assert not BAD_NVCC.match(version), (
            f"{what} is {version}: CUDA 13.1-13.3 miscompile DSV4 top-k on sm_90a; use 13.0.x"
        )
        assert version.startswith(expect["cuda"]), f"{what} is {version}, the recipe wants {expect['cuda']}.x"


# ------------------------------------------------------------------ ABI pairing

ABI_PROBE = """
import json, torch
out = {"torch": torch.__version__}
import importlib.metadata
try:
    out["torchvision"] = importlib.metadata.version("torchvision")
except Exception:
    out["torchvision"] = "(not installed)"
try:
    import torchvision
except Exception as exc:
    out["import_error"] = f"{type(exc).__name__}: {exc}"
try:
    torch.ops.torchvision.nms
    out["registered"] = True
except Exception as exc:
    out["registered"] = False
    out["op_error"] = f"{type(exc).__name__}: {exc}"
if out.get("registered"):
    import torchvision.ops
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7])
    out["keep"] = torchvision.ops.nms(boxes, scores, 0.5).tolist()
print(json.dumps(out))
"""


def abi_fix(torch_version: str) -> str:
    minor = ".".join(torch_version.split("+")[0].split(".")[:2])
    tv = TORCHVISION_FOR_TORCH.get(minor)
    return (
        f"install torchvision=={tv}.* built for torch {minor} (uv pip install --no-deps 'torchvision=={tv}.*')"
        if tv
        else f"install the torchvision release built for torch {minor}"
    )


def test_torch_torchvision_abi(py, expect):
    if not expect.get("torchvision_pair"):
        pytest.skip("the recipe does not pair torch with torchvision")
    result = py(ABI_PROBE)
    assert result.rc == 0, f"ABI probe crashed: {lines_of(result).splitlines()[-1:]}"
    out = json.loads(result.stdout.strip().splitlines()[-1])
    torch_v, tv = out["torch"], out["torchvision"]
    if not out.get("registered"):
        detail = out.get("import_error") or out.get("op_error", "")
        pytest.fail(
            f"ABI mismatch: torchvision {tv} does not register its operators with torch {torch_v} "
            f"(operator torchvision::nms does not exist; {detail.splitlines()[0] if detail else ''}); "
            f"fix: {abi_fix(torch_v)}"
        )
    assert out["keep"] == [0, 2], f"torchvision.ops.nms gave {out['keep']} on CPU, expected [0, 2]"


# ------------------------------------------------------------------ CUDA archs (no GPU needed)

FIND_SO = """
import importlib.util, os, sys
spec = importlib.util.find_spec(sys.argv[1])
if spec is None:
    sys.exit("module not found")
if spec.origin and spec.origin.endswith(".so"):  # one extension module, not its whole package
    print(spec.origin); sys.exit(0)
root = os.path.dirname(spec.origin) if spec.origin else list(spec.submodule_search_locations)[0]
for d, _, files in os.walk(root):
    for f in sorted(files):
        if ".so" in f:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                data = fh.read()
            if b".nv_fatbin" in data or b"__nv_relfatbin" in data:
                print(p)
"""


def test_cuda_archs(host, python, expect, cuobjdump, arch_module):
    wanted = expect.get("archs") or []
    if not wanted:
        pytest.skip("the recipe declares no CUDA archs")
    listing = host.run(f"{shlex.quote(python)} -c {shlex.quote(FIND_SO)} {shlex.quote(arch_module)}")
    assert listing.rc == 0, f"cannot look into {arch_module}: {lines_of(listing).splitlines()[-1:]}"
    objects = listing.stdout.split()
    assert objects, f"{arch_module} has no shared object with CUDA code; it was not built for CUDA"
    missing, seen_any = [], False
    for path in objects:
        rc, out = cuobjdump(path)
        archs = sorted(set(re.findall(r"\.(sm_\d+a?)\.cubin", out)))
        if not archs:
            continue  # PTX or host-only fatbin section: no SASS to judge
        seen_any = True
        if not set(archs) & set(wanted):
            missing.append(f"{path.rsplit('/', 1)[-1]} has {','.join(archs)}")
    assert seen_any, f"no SASS cubins in {arch_module}'s extension modules ({len(objects)} with fatbins)"
    assert not missing, (
        f"{arch_module}: no {' or '.join(wanted)} SASS in: {'; '.join(missing)}; rebuild with TORCH_CUDA_ARCH_LIST=9.0a"
    )


# ------------------------------------------------------------------ GPU (skipped without one)

GPU_PROBE = """
import json, torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
out = {"count": n, "caps": [list(torch.cuda.get_device_capability(i)) for i in range(n)],
       "names": [torch.cuda.get_device_name(i) for i in range(n)]}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def gpus(py, require_gpu, expect):
    if not (expect.get("cuda") or "torch" in (expect.get("imports") or [])):
        pytest.skip("the recipe has no torch/CUDA stack to exercise a GPU with")
    result = py(GPU_PROBE)
    assert result.rc == 0, f"GPU probe failed: {lines_of(result).splitlines()[-1:]}"
    out = json.loads(result.stdout.strip().splitlines()[-1])
    if out["count"] == 0:
        if require_gpu:
            pytest.fail("no CUDA device visible and --require-gpu was given (pass --gpus all / check the driver)")
        pytest.skip("no CUDA device visible (use --require-gpu to make this a failure)")
    return out


def test_gpu_capability_matches_the_recipe_archs(gpus, expect):
    """Every visible device is of a capability the recipe's SASS archs are for (sm_90a -> (9, 0));
    a recipe that names no archs is for Hopper."""
    wanted = {
        (int(m.group(1)), int(m.group(2)))
        for a in expect.get("archs") or []
        for m in [re.fullmatch(r"sm_(\d+)(\d)a?", a)]
        if m
    } or {(9, 0)}
    bad = [
        f"{i}: {name} {tuple(cap)}"
        for i, (cap, name) in enumerate(zip(gpus["caps"], gpus["names"]))
        if tuple(cap) not in wanted
    ]
    assert not bad, f"devices that are not of the recipe's archs {sorted(wanted)}: {bad}"


def test_gpu_matmul(py, gpus):
    result = py(
        "import torch\na = torch.ones(256, 256, device='cuda', dtype=torch.bfloat16)\nprint(float((a @ a)[0, 0]))"
    )
    assert result.rc == 0 and result.stdout.strip() == "256.0", f"CUDA matmul failed: {lines_of(result)[-300:]}"


def test_gpu_import(py, gpus, gpu_module):
    """Modules that load the CUDA driver when imported (sgl_kernel) can only be imported with a GPU."""
    result = py(f"import {checked_module(gpu_module)}")
    assert result.rc == 0, f"`import {gpu_module}` failed: {lines_of(result).splitlines()[-1:]}"


def test_gpu_torchvision_nms(py, gpus, expect):
    if not expect.get("torchvision_pair"):
        pytest.skip("the recipe does not pair torch with torchvision")
    result = py(
        "import torch, torchvision\n"
        "b = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], dtype=torch.float32, device='cuda')\n"
        "s = torch.tensor([0.9, 0.8, 0.7], device='cuda')\n"
        "print(torch.ops.torchvision.nms(b, s, 0.5).tolist())"
    )
    assert result.rc == 0 and result.stdout.strip() == "[0, 2]", f"CUDA nms failed: {lines_of(result)[-300:]}"


# ------------------------------------------------------------------ manifest and labels


@pytest.fixture(scope="module")
def manifest(host, expect):
    if not expect.get("image"):
        pytest.skip("the host under test is not a servebuild image (no manifest expected)")
    f = host.file(expect["manifest_path"])
    assert f.exists, f"build manifest {expect['manifest_path']} is missing from the image"
    try:
        return json.loads(f.content_string)
    except ValueError as exc:
        pytest.fail(f"build manifest {expect['manifest_path']} does not parse: {exc}")


def test_manifest_matches_recipe(manifest, expect):
    want = expect["manifest"]
    assert manifest["recipe"]["name"] == want["recipe"], (
        f"manifest is for recipe {manifest['recipe']['name']}, expected {want['recipe']}"
    )
    source = (manifest.get("engine") or {}).get("source") or {}
    assert source.get("commit") == want["source_commit"], (
        f"manifest source commit {source.get('commit')} != recipe's {want['source_commit']}"
    )
    got = [p["id"] for p in source.get("patches", [])]
    assert got == want["patches"], f"manifest patch stack {got} != recipe's {want['patches']}"


def test_labels_agree_with_manifest(manifest, expect):
    labels = expect.get("labels")
    if labels is None:
        pytest.skip("labels are only visible to the engine (run through `invoke test-image --image`)")
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    import hashlib

    digest = hashlib.sha256(canonical.encode()).hexdigest()
    assert labels.get("io.servebuild.manifest.sha256") == digest, (
        "the manifest in the image does not match the io.servebuild.manifest.sha256 label: it was changed after build"
    )
    source = (manifest.get("engine") or {}).get("source") or {}
    assert labels.get("org.opencontainers.image.revision", "") == (source.get("commit") or ""), (
        "org.opencontainers.image.revision disagrees with the manifest's source commit"
    )
    assert labels.get("io.servebuild.recipe") == manifest["recipe"]["name"]


# ------------------------------------------------------------------ launchers and runtime layout


def needs_gpu_for_help(request, expect):
    if expect.get("help_needs_gpu"):
        request.getfixturevalue("gpus")  # skips (or fails with --require-gpu) without a device


def test_launch_profile_answers_help(request, host, expect, profile):
    path = f"/usr/local/bin/{profile}"
    assert host.file(path).exists, f"launch command {path} is missing"
    assert host.file(path).mode & 0o111, f"launch command {path} is not executable"
    assert host.run(f"/bin/sh -n {shlex.quote(path)}").rc == 0, f"launch command {path} is not valid shell"
    needs_gpu_for_help(request, expect)
    result = host.run(f"{shlex.quote(path)} --help")
    assert result.rc == 0, f"`{profile} --help` failed (rc {result.rc}): {lines_of(result)[-300:]}"


def test_launch_profile_was_parsed_by_the_engine_at_build(host, expect, profile):
    """The build ran this launcher once, stopped right after the engine's own argument parser (the
    profile-check stage): its record in the image names the profile and the parser."""
    if not expect.get("image") or not expect.get("profile_check"):
        pytest.skip("only images of an engine kind with a profile check (sglang, vllm) carry its record")
    path = "/opt/servebuild/profiles-checked.json"
    assert host.file(path).exists, f"{path} is missing: the image was built without the profile check"
    record = json.loads(host.file(path).content_string)
    assert record.get("engine") == expect["engine"]["dist"], record
    assert profile in record.get("profiles", {}), f"profile {profile} was not parsed at build time: {record}"


def test_the_image_says_what_it_is(host, expect, manifest):
    """servebuild_info.py, run by the image's Python, names the recipe, variant, patch stack and every
    launch profile of the manifest, each with the parser that accepted it at build time."""
    tool = expect.get("info_tool")
    if not tool:
        pytest.skip("images of an engine kind that compiles while serving carry servebuild_info.py")
    result = host.run(f"{expect['python']} {tool} --json")
    assert result.rc == 0, f"servebuild_info.py --json failed (rc {result.rc}): {lines_of(result)[-300:]}"
    info = json.loads(result.stdout)
    assert (info["recipe"], info["variant"]) == (manifest["recipe"]["name"], manifest["recipe"].get("variant")), info
    assert [p["id"] for p in info["engine"]["patches"]] == expect["manifest"]["patches"], info
    assert sorted(info["profiles"]) == sorted(manifest["launch"]["profiles"]), info
    assert all(info["profiles"].values()) or not expect.get("profile_check"), f"a profile not checked: {info}"
    tree = ((manifest.get("engine") or {}).get("source") or {}).get("tree") or {}
    if tree.get("sdist_commit"):  # a release sdist: the commit it was cut from (its version file's), as recorded
        assert f"cut from commit {tree['sdist_commit']} " in info["engine"]["tree"], info
    shown = host.run(f"{expect['python']} {tool}")
    assert shown.rc == 0 and f"image: {manifest['recipe']['name']}, variant" in shown.stdout, lines_of(shown)


def test_the_bench_runs_in_the_image(host, expect):
    """servebuild-bench is on PATH with its prompts, runs on the image's Python, and refuses a server that
    never answers in one line (exit 2) with its partial record written: what a bisect --suite row runs."""
    if not expect.get("image") or not (expect.get("engine") or {}).get("dist") or not expect.get("profiles"):
        pytest.skip("engine images with launch profiles carry the bench")
    check = host.run("servebuild-bench --check --suite prefill,decode,story,tail,grid")
    assert check.rc == 0, f"servebuild-bench --check failed (rc {check.rc}): {lines_of(check)[-300:]}"
    for name in ("prose.txt", "code-review.txt", "stories.txt"):
        assert host.file(f"/usr/local/share/servebuild-bench/bench_prompts/{name}").size > 500, name
    dead = host.run("servebuild-bench --suite decode --url http://127.0.0.1:9 --health-timeout 2 --out /tmp/sb-bench")
    errors = [ln for ln in dead.stderr.splitlines() if ln.strip()]
    assert dead.rc == 2 and len(errors) == 1 and "was not healthy after 2 s" in errors[0], (dead.rc, dead.stderr)
    assert json.loads(host.file("/tmp/sb-bench/bench.json").content_string)["partial"] is True


def test_server_image_has_an_init_and_numactl(host, expect):
    """PID 1 is tini (signals reach the server, zombies are reaped); vLLM's NUMA binding runs numactl."""
    if not expect.get("image") or not (expect.get("engine") or {}).get("dist"):
        pytest.skip("only engine images are servers")
    assert host.file("/usr/bin/tini").mode & 0o111, "/usr/bin/tini is missing"
    assert host.run("numactl --show").rc == 0 or host.exists("numactl"), "numactl is missing"
    assert host.run("ldconfig -p | grep -q 'libnuma.so.1'").rc == 0, "libnuma.so.1 is missing"


def test_runs_as_documented_user(host, expect):
    if not expect.get("image"):
        pytest.skip("not an image: no documented user")
    uid = host.run("/usr/bin/id -u").stdout.strip()
    assert uid == str(expect["user"]), f"runs as uid {uid}, the recipe documents {expect['user']}"


def test_workdir(host, expect):
    if not expect.get("image"):
        pytest.skip("not an image: no documented workdir")
    assert host.file(expect["workdir"]).is_directory, f"workdir {expect['workdir']} is missing"


def test_cache_dir_exists_and_is_writable(host, expect, cache_dir):
    if not expect.get("image"):
        pytest.skip("not an image: cache dirs are the host's business")
    assert host.file(cache_dir).is_directory, f"cache dir {cache_dir} is missing"
    probe = f"{cache_dir}/.smoke-write-test"
    assert host.run(f"/bin/touch {shlex.quote(probe)} && /bin/rm {shlex.quote(probe)}").rc == 0, (
        f"cache dir {cache_dir} is not writable"
    )


def test_cache_dir_is_writable_by_any_user(host, expect, cache_dir):
    """`docker run --user 1000:1000 -v sbcache:/cache` must be able to write every JIT cache: the
    dirs under /cache are world-writable and sticky, as /tmp, and a new volume copies that mode."""
    if not expect.get("image") or not cache_dir.startswith("/cache"):
        pytest.skip("only the image's /cache is shared by every user")
    mode = host.file(cache_dir).mode
    assert mode & 0o1777 == 0o1777, f"{cache_dir} has mode {oct(mode)}: a non-root --user cannot write it"


def test_no_anonymous_volumes(expect):
    """A VOLUME persists nothing unless mounted and leaks an anonymous volume per container."""
    if expect.get("labels") is None:
        pytest.skip("image config is only visible to the engine (run through `invoke test-image`)")
    assert not expect.get("volumes"), f"the image declares VOLUMEs {expect['volumes']}: mount a cache root instead"


def test_cache_variable_is_set(host, expect, cache_var):
    """Each cache variable holds the directory the engine kind gives it; that the engine really writes
    there is proven by the packages' own resolution (test_cache.py), not by finding the name in a file."""
    env = host.run(f"printenv {shlex.quote(cache_var)}").stdout.strip()
    assert env == expect["cache_env"][cache_var], f"{cache_var} is {env!r}, expected {expect['cache_env'][cache_var]}"


def test_entrypoint_help_offline(request, host, python, expect, entrypoint):
    """The server entry point imports and parses its arguments with the network off."""
    needs_gpu_for_help(request, expect)
    result = host.run(f"{shlex.quote(python)} -m {shlex.quote(entrypoint)} --help")
    assert result.rc == 0, f"`python -m {entrypoint} --help` failed (rc {result.rc}): {lines_of(result)[-400:]}"
