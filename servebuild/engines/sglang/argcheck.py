"""SGLang's hook for servebuild's launch-profile check (runs inside the image; see tools/argcheck_site.py).

`python -m sglang.launch_server` (and `sglang serve`) read their argv with
`sglang.srt.server_args.prepare_server_args`: SGLang's own argparse parser (ServerArgs.add_cli_args,
`--config` files merged), then `ServerArgs.from_cli_args`, whose __post_init__ needs the model and
a GPU. The hook stops there, with the parsed namespace: every flag, choice and type has been read
by SGLang's parser, and nothing needs a GPU.
"""


def install(parsed):
    from sglang.srt import server_args

    def from_cli_args(cls, namespace):
        parsed(namespace, "sglang.srt.server_args.prepare_server_args")

    server_args.ServerArgs.from_cli_args = classmethod(from_cli_args)
