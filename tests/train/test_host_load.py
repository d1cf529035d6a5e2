"""The host's load while a stage ran: the control is matched to GRPO by CPU time only on an equally busy host
(issue 21, run 14: a control trained beside another run got 23 SFT steps for the budget an idle one spent on 18)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from muarl.train import host_load
from muarl.train.host_load import HostLoad, busy_seconds, others_cpus, uneven_load

STAT = """cpu  1000 50 300 9000 20 5 15 10 0 0
cpu0 500 25 150 4500 10 2 7 5 0 0
intr 123
"""


def test_busy_seconds_count_user_nice_system_irq_softirq_and_steal_not_idle_or_iowait():
    assert busy_seconds(STAT, 100) == pytest.approx((1000 + 50 + 300 + 5 + 15 + 10) / 100)
    assert busy_seconds("cpu  200 0 100 700\n", 100) == pytest.approx(3.0)  # an old kernel's four fields
    with pytest.raises(ValueError, match="aggregate cpu line"):
        busy_seconds("intr 1 2 3\n", 100)


def test_others_cpus_is_the_hosts_busy_time_less_the_processs_own_per_wall_second():
    assert others_cpus(host_busy_s=30.0, own_cpu_s=12.0, wall_s=10.0) == pytest.approx(1.8)
    assert others_cpus(host_busy_s=11.9, own_cpu_s=12.0, wall_s=10.0) == 0.0  # tick rounding never goes negative
    assert others_cpus(host_busy_s=1.0, own_cpu_s=0.0, wall_s=0.0) == 0.0


def test_a_control_on_a_busier_host_than_grpos_is_uneven_and_one_without_a_record_is_not_judged():
    assert uneven_load({"others_cpus": 0.05}, {"others_cpus": 1.0}) == (0.05, 1.0)
    assert uneven_load({"others_cpus": 0.05}, {"others_cpus": 0.5}) is None  # within half a CPU
    assert uneven_load({"others_cpus": 1.2}, {"others_cpus": 0.1}) == (1.2, 0.1)  # a quieter control is uneven too
    assert uneven_load({}, {"others_cpus": 1.0}) is None  # a stage recorded before the load was


@pytest.mark.skipif(not host_load.PROC_STAT.exists(), reason="needs /proc/stat")
def test_a_process_spinning_beside_the_stage_shows_as_other_load():
    load = HostLoad.start()
    spin = subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5: pass"],
                          timeout=60)
    assert spin.returncode == 0
    others, wall = load.others(), time.monotonic() - load.wall
    # the other processes' busy CPU seconds hold at least the spinner's 1.5 (however busy the host was besides)
    assert others is not None and others * wall >= 1.4
