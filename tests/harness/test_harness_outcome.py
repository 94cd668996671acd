from repro.core.harness_outcome import HarnessOutcome, last_line, mask_secrets, read_outcome


def test_still_running_at_the_limit_is_hung():
    assert read_outcome(None, "thinking...\n", answered=False).outcome is HarnessOutcome.HUNG


def test_exit_zero_with_the_answer_is_recovered():
    assert read_outcome(0, "DONE-42\n", answered=True).outcome is HarnessOutcome.RECOVERED


def test_exit_zero_without_the_answer_is_not_called_recovered():
    assert read_outcome(0, "", answered=False).outcome is HarnessOutcome.FAILED_SILENTLY


def test_non_zero_exit_is_failed_clearly_with_its_last_line():
    reading = read_outcome(1, "round 1\nError: 429 Too Many Requests\n\n", answered=False)
    assert reading.outcome is HarnessOutcome.FAILED_CLEARLY
    assert reading.last_line == "Error: 429 Too Many Requests"
    assert reading.exit_code == 1


def test_secrets_never_reach_the_last_line():
    line = last_line("Authorization: Bearer sk-abcdef123456 rejected\n")
    assert "sk-abcdef123456" not in line and "Authorization: Bearer ***" in line
    assert mask_secrets("key sk-live_0123456789 bad") == "key *** bad"
    assert mask_secrets('x-api-key="abc123secret"') == 'x-api-key="***"'
