"""9 cli — the commands behind `invoke`: option grammar -> one library sequence -> printed result.

In: the options of one command, as invoke parsed them, and the project root.
Out: lines on stdout and an exit status (a ServebuildError is one line on stderr and exit 2; a failed
smoke verdict is exit 1). `tasks.py` holds only the invoke tasks (help text and one call each); build,
bisect, warm, publish and test-image declare their options once, as one dataclass each beside the command
(BuildArgs, BisectArgs, WarmArgs, PublishArgs, TestImageArgs: a field is the option, its default and help),
from which front.options_task makes the task's parameters and help and which the command takes whole;
front.py maps errors and invoke's own parse errors to one line; options.py is the shared grammar.
Reads: every station below it.
"""
