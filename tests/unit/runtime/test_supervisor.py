import pytest

import wire
from wire.runtime.runner import RunSummary
from wire.runtime.supervisor import RestartPolicy, supervise


def test_backoff_doubles_up_to_the_cap():
    p = RestartPolicy(max_restarts=6, initial_backoff_s=1, max_backoff_s=5)
    assert [p.backoff(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]


def test_restarts_until_success_and_merges_summaries():
    calls, waits = [], []

    def run():
        calls.append(1)
        if len(calls) < 3:
            raise wire.FlowFailed(f"sink exploded #{len(calls)}\nstack...")
        s = RunSummary("f", epochs=4)
        s.metrics[("src", "events")] = 10
        return s

    summary = supervise(run, RestartPolicy(max_restarts=3, initial_backoff_s=0.5), flow_id="f",
                        sleep=waits.append)
    assert len(calls) == 3 and waits == [0.5, 1.0]
    assert summary.restarts == 2
    assert summary.failures == ["sink exploded #1", "sink exploded #2"]


def test_gives_up_after_max_restarts():
    def run():
        raise wire.FlowFailed("always")

    with pytest.raises(wire.FlowFailed, match="always"):
        supervise(run, RestartPolicy(max_restarts=2, initial_backoff_s=0), flow_id="f",
                  sleep=lambda s: None)


@pytest.mark.parametrize(("kwargs", "param"), [({"max_restarts": -1}, "max_restarts"),
                                               ({"multiplier": 0.5}, "multiplier")])
def test_policy_validated(kwargs, param):
    with pytest.raises(wire.ConfigError, match=param):
        RestartPolicy(**kwargs)
