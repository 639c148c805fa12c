"""9 cli — the commands behind `invoke`: option grammar -> one library sequence -> printed result.

In: the options of one command, as invoke parsed them, and the project root.
Out: lines on stdout and an exit status (a ServebuildError is one line on stderr and exit 2; a failed
smoke verdict is exit 1). `tasks.py` holds only the invoke tasks (help text and one call each);
front.py maps errors and invoke's own parse errors to one line; options.py is the shared grammar.
Reads: every station below it.
"""
