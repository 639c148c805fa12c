"""cli — the commands behind `invoke`: option grammar -> one library sequence -> printed result.

In: the options of one command, as invoke parsed them, and the project root. Out: lines on stdout,
and an exit status (a ServebuildError is one line and exit 2; a failed smoke verdict is exit 1).
Reads: every station below it. `tasks.py` holds only the invoke tasks (help text and one call each);
`front` maps errors and invoke's own parse errors to one line, exit 2.
"""
