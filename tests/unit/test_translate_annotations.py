"""Slurm options from ``slurmbridge.io/`` annotations: accepted forms and actionable errors."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge import keys
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.options import PodGroup, SlurmOptions, pod_group, slurm_options
from bridge.jobs.request import SlurmPlacement
from bridge.jobs.timelimit import parse_time_limit


def test_no_annotations_leave_every_choice_to_slurm() -> None:
    assert slurm_options(None) == slurm_options({}) == SlurmOptions()
    assert SlurmOptions().placement.exclusive is False


def test_every_option_is_read() -> None:
    options = slurm_options({
        keys.PARTITION: "gpu", keys.ACCOUNT: "physics", keys.QOS: "high",
        keys.RESERVATION: "maint_2024.q1", keys.WCKEY: "proj-7",
        keys.CONSTRAINTS: "a100&ib", keys.PRIORITY: "100", keys.TIME_LIMIT: "1-00:00:00",
        keys.EXCLUSIVE: "true", keys.GPUS: "2", "example.com/other": "ignored",
    })
    assert options == SlurmOptions(
        SlurmPlacement(
            partition="gpu", account="physics", qos="high", reservation="maint_2024.q1",
            wckey="proj-7", constraints="a100&ib", priority=100, exclusive=True,
        ),
        time_limit_minutes=1440, gpus=2,
    )


def test_surrounding_whitespace_is_ignored_and_blank_means_unset() -> None:
    options = slurm_options({keys.PARTITION: " gpu\n", keys.ACCOUNT: "", keys.TIME_LIMIT: "  "})
    assert options == SlurmOptions(SlurmPlacement(partition="gpu"))


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("90", 90), ("1-00:00:00", 1440), ("2-12", 3600), ("1-01:30", 1530), ("01:30:00", 90),
     ("48:00:00", 2880), ("10:30", 11), ("00:00:30", 1), ("0:59", 1), ("0-00:01:00", 1)],
)
def test_time_limit_takes_slurm_forms_rounding_seconds_up(text: str, minutes: int) -> None:
    assert slurm_options({keys.TIME_LIMIT: text}).time_limit_minutes == minutes


@pytest.mark.parametrize(
    "text", ["abc", "0", "00:00", "-5", "1.5", "1h", "1:60", "1:00:60", "1-24", "1-00:60",
             "1:2:3:4", "1-2-3", "1-", ":30", "4294967296"],
)
def test_bad_time_limit_names_the_annotation_and_the_slurm_forms(text: str) -> None:
    with pytest.raises(InvalidPodRequest) as raised:
        slurm_options({keys.TIME_LIMIT: text})
    error = raised.value
    assert (error.field, error.value) == (keys.TIME_LIMIT, text)
    assert "D-HH:MM:SS" in error.accepted


def test_time_limit_error_reads_as_a_fix() -> None:
    with pytest.raises(InvalidPodRequest) as raised:
        slurm_options({keys.TIME_LIMIT: "abc"})
    assert str(raised.value) == (
        'annotation slurmbridge.io/time-limit="abc": expected minutes (e.g. 90), '
        "or D-HH:MM:SS, D-HH:MM, D-HH, HH:MM:SS or MM:SS"
    )


@given(
    st.integers(0, 400), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59)
)
def test_day_form_counts_every_unit(days: int, hours: int, minutes: int, seconds: int) -> None:
    total = days * 1440 + hours * 60 + minutes + (seconds > 0)
    text = f"{days}-{hours:02}:{minutes:02}:{seconds:02}"
    if total:
        assert parse_time_limit(text) == total
    else:
        with pytest.raises(ValueError):
            parse_time_limit(text)


NAME_KEYS = [keys.PARTITION, keys.ACCOUNT, keys.QOS, keys.RESERVATION, keys.WCKEY]


@pytest.mark.parametrize("key", NAME_KEYS)
@pytest.mark.parametrize(
    "bad", ["gpu;rm -rf /", "a b", "x" * 65, "gpü", "$(id)", "a\nb", "`id`", "a,b;c"]
)
def test_slurm_names_outside_the_safe_charset_are_refused(key: str, bad: str) -> None:
    with pytest.raises(InvalidPodRequest, match=f"annotation {key}=") as raised:
        slurm_options({key: bad})
    assert raised.value.field == key
    assert "letters, digits" in raised.value.accepted


@pytest.mark.parametrize("key", NAME_KEYS)
def test_slurm_names_up_to_64_characters_pass_unchanged(key: str) -> None:
    for good in ("gpu-a100_v2.1", "x" * 64):
        placement = slurm_options({key: good}).placement
        assert getattr(placement, key.removeprefix(keys.PREFIX)) == good


@pytest.mark.parametrize("key", [keys.PARTITION, keys.RESERVATION])
def test_partitions_and_reservations_may_be_lists_as_slurm_allows(key: str) -> None:
    options = slurm_options({key: "gpu, gpu-long"})
    assert getattr(options.placement, key.removeprefix(keys.PREFIX)) == "gpu,gpu-long"


@pytest.mark.parametrize("key", [keys.ACCOUNT, keys.QOS, keys.WCKEY])
def test_single_valued_names_refuse_lists(key: str) -> None:
    with pytest.raises(InvalidPodRequest, match=f"annotation {key}="):
        slurm_options({key: "a,b"})


@pytest.mark.parametrize("key", [keys.PARTITION, keys.RESERVATION])
@pytest.mark.parametrize("bad", ["gpu,", ",gpu", "gpu,,cpu", "gpu,c pu"])
def test_name_lists_need_a_name_between_every_comma(key: str, bad: str) -> None:
    with pytest.raises(InvalidPodRequest, match="comma-separated list"):
        slurm_options({key: bad})


@pytest.mark.parametrize("good", ["a100", "a100&ib", "[rack1|rack2]", "a100*2", "(a|b)&c",
                                  "gpu:a100", "!slow", "x86_64,avx-512.1"])
def test_feature_expressions_pass_unchanged(good: str) -> None:
    assert slurm_options({keys.CONSTRAINTS: good}).placement.constraints == good


@pytest.mark.parametrize("bad", ["a100 && ib", "a$(id)", "a\nb", "a;b", "a>b", "x" * 1025])
def test_feature_expressions_with_other_characters_are_refused(bad: str) -> None:
    with pytest.raises(InvalidPodRequest, match="feature expression"):
        slurm_options({keys.CONSTRAINTS: bad})


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("100", 100), ("4294967293", 2**32 - 3)])
def test_priority_is_a_non_negative_integer(text: str, value: int) -> None:
    assert slurm_options({keys.PRIORITY: text}).placement.priority == value


@pytest.mark.parametrize("key", [keys.PRIORITY, keys.GPUS])
@pytest.mark.parametrize("bad", ["-1", "1.5", "high", "+3", "4294967294", "\u0663", "1e3"])
def test_counts_that_are_not_plain_whole_numbers_are_refused(key: str, bad: str) -> None:
    with pytest.raises(InvalidPodRequest, match="expected a whole number from 0"):
        slurm_options({key: bad})


@pytest.mark.parametrize(("text", "value"), [("true", True), ("TRUE", True), ("false", False),
                                             ("False", False)])
def test_exclusive_is_a_boolean(text: str, value: bool) -> None:
    assert slurm_options({keys.EXCLUSIVE: text}).placement.exclusive is value


@pytest.mark.parametrize("bad", ["yes", "1", "on", "exclusive"])
def test_exclusive_accepts_only_true_or_false(bad: str) -> None:
    with pytest.raises(InvalidPodRequest, match='expected "true" or "false"'):
        slurm_options({keys.EXCLUSIVE: bad})


def test_group_labels_give_name_and_size() -> None:
    assert pod_group(None) is None
    assert pod_group({"app": "x"}) is None
    labels = {keys.GROUP: "allreduce", keys.GROUP_SIZE: "4"}
    assert pod_group(labels) == PodGroup("allreduce", 4)


@pytest.mark.parametrize(
    ("labels", "field"),
    [
        ({keys.GROUP: "allreduce"}, keys.GROUP_SIZE),
        ({keys.GROUP_SIZE: "4"}, keys.GROUP),
        ({keys.GROUP: "allreduce", keys.GROUP_SIZE: "0"}, keys.GROUP_SIZE),
        ({keys.GROUP: "allreduce", keys.GROUP_SIZE: "four"}, keys.GROUP_SIZE),
    ],
)
def test_incomplete_or_bad_group_labels_name_the_label(
    labels: dict[str, str], field: str
) -> None:
    with pytest.raises(InvalidPodRequest, match=f"label {field}") as raised:
        pod_group(labels)
    assert raised.value.field == field


def test_missing_group_size_message_names_the_group() -> None:
    with pytest.raises(InvalidPodRequest) as raised:
        pod_group({keys.GROUP: "allreduce"})
    assert str(raised.value) == (
        "label slurmbridge.io/group-size is missing: "
        "expected the number of pods in group 'allreduce'"
    )
