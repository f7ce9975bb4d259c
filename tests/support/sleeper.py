"""``python -m sleeper worker [--ignore-sigterm]``: a stand-in worker for the launcher's tests.

It says ``ready`` once its signal handling is set, then sleeps; with
``--ignore-sigterm`` it is a worker whose shutdown hangs.
"""

from __future__ import annotations

import signal
import sys
import time

if __name__ == "__main__":
    if "--ignore-sigterm" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    time.sleep(120)
