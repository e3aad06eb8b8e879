"""The lab's own lock (filelock): one `lab up`/`down` at a time, the next one waits."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sparkbase_lab.fleet import Lab


def test_a_second_holder_waits_until_the_first_lets_go(tmp_path: Path) -> None:
    events: list[str] = []
    holding = threading.Event()

    def second() -> None:
        holding.wait(5)
        with Lab(tmp_path)._locked():
            events.append("second in")

    waiter = threading.Thread(target=second)
    waiter.start()
    with Lab(tmp_path)._locked():
        holding.set()
        time.sleep(0.5)
        events.append("first out")
    waiter.join(10)
    assert events == ["first out", "second in"]
    assert (tmp_path / ".lock").is_file()
