import pytest
from hypothesis import given
from hypothesis import strategies as st

from repro.core.faultspec import FaultSpecError, ValueKind, parse_fault_spec

KNOWN = {"hang": ValueKind.NONE, "slow": ValueKind.FLOAT, "wedge-after": ValueKind.INT,
         "saturate": ValueKind.OPTIONAL_INT}


def test_name_value_and_options():
    spec = parse_fault_spec("wedge-after=2,per=conn,after=3", KNOWN)
    assert (spec.name, spec.value, spec.after_requests, spec.per_connection) == ("wedge-after", 2, 3, True)
    assert parse_fault_spec("slow=4", KNOWN).value == 4.0
    assert parse_fault_spec("hang,after=1.5s", KNOWN).after_seconds == 1.5
    assert parse_fault_spec("saturate", KNOWN).value is None
    assert parse_fault_spec(" HANG , extra=x ", KNOWN).params == {"extra": "x"}
    assert str(parse_fault_spec("hang,after=3", KNOWN)) == "hang,after=3"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty fault spec"),
        ("hnag", "unknown fault 'hnag'"),
        ("hang=3", "takes no value"),
        ("slow", "needs a number"),
        ("slow=fast", "must be a number"),
        ("wedge-after=-1", "must not be negative"),
        ("hang,after", "must be KEY=VALUE"),
        ("hang,after=x", "must be an integer"),
        ("hang,per=everyone", "per must be"),
    ],
)
def test_bad_specs_give_one_clear_line(text, fragment):
    with pytest.raises(FaultSpecError) as caught:
        parse_fault_spec(text, KNOWN)
    message = str(caught.value)
    assert fragment in message and "\n" not in message


@given(st.text(max_size=60))
def test_arbitrary_text_raises_only_our_error(text):
    try:
        parse_fault_spec(text, KNOWN)
    except FaultSpecError:
        pass
