# Shared by every area: keep minimal. The cluster tier's fixtures live in the package.
import signal

pytest_plugins = ["specguard.testing.pytest_plugin"]

# A shell that starts the suite in the background without job control (`.ci/run &`) makes
# it ignore SIGINT, and every process it starts inherits that: the Ctrl-C tests (demo,
# evaluate) need their commands to get SIGINT as a user's terminal delivers it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
