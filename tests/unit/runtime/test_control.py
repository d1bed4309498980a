from wire.core.control_file import control_path, is_paused, read_control, set_paused, set_stopping


def test_pause_flow_and_connector(tmp_path):
    path = control_path(tmp_path)
    assert read_control(path) == {} and not is_paused(path, "src")
    set_paused(path, True, "src")
    assert is_paused(path, "src") and not is_paused(path, "other") and not is_paused(path)
    set_paused(path, True)
    assert is_paused(path, "other")
    set_paused(path, False)
    set_paused(path, False, "src")
    assert not is_paused(path, "src")
    set_stopping(path, True)
    assert is_paused(path, "src")


def test_missing_or_corrupt_file_means_running(tmp_path):
    assert not is_paused(None, "x")
    (tmp_path / "control.json").write_text("{not json")
    assert not is_paused(str(tmp_path / "control.json"), "x")


def test_open_breaker_holds_sources_and_does_not_unpause(tmp_path):
    from wire.core.control_file import open_breakers, set_breaker

    path = control_path(tmp_path)
    set_paused(path, True)
    set_breaker(path, "db", True, retry_at=123.0)
    assert is_paused(path, "src") and open_breakers(path) == {"db": {"open": True, "retry_at": 123.0}}
    set_breaker(path, "db", False)
    assert open_breakers(path) == {}
    assert is_paused(path, "src"), "closing a breaker must not resume a user's pause"
    set_paused(path, False)
    assert not is_paused(path, "src")
