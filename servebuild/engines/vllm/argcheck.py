"""vLLM's hook for servebuild's launch-profile check (runs inside the image; see tools/argcheck_site.py).

`python -m vllm.entrypoints.cli.main serve ...` builds vLLM's FlexibleArgumentParser with every
subcommand, parses the argv, runs the subcommand's `validate` (validate_parsed_serve_args) and
then dispatches to `ServeSubcommand.cmd`, which starts the engine: the hook stops at that dispatch.
Without a GPU vLLM resolves no platform and its parser cannot even be built ("Failed to infer
device type"); vLLM's own CLI then switches to the CPU platform for `vllm bench`, and the hook does
the same, before any vLLM module reads the platform. Flags, choices and types do not depend on it.
"""


def install(parsed):
    from vllm import platforms

    if platforms.current_platform.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()
    from vllm.entrypoints.cli import serve

    def cmd(namespace):
        parsed(namespace, "vllm.entrypoints.cli.main (serve)")

    serve.ServeSubcommand.cmd = staticmethod(cmd)
