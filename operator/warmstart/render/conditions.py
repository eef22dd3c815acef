"""Set metav1-style conditions: lastTransitionTime moves only when the status flips."""

from __future__ import annotations

from collections.abc import Iterable

from warmstart.api.base import Condition, ConditionStatus


def set_condition(conditions: Iterable[Condition], new: Condition, now: str) -> list[Condition]:
    """The list with `new` merged in; an unchanged status keeps its lastTransitionTime."""
    result: list[Condition] = []
    found = False
    for old in conditions:
        if old.type != new.type:
            result.append(old)
            continue
        found = True
        since = old.last_transition_time if old.status == new.status and old.last_transition_time else now
        result.append(new.model_copy(update={"last_transition_time": since}))
    if not found:
        result.append(new.model_copy(update={"last_transition_time": now}))
    return result


def merge_conditions(old: Iterable[Condition], new: Iterable[Condition], now: str) -> list[Condition]:
    """Merge every condition of `new` into `old`."""
    merged = list(old)
    for condition in new:
        merged = set_condition(merged, condition, now)
    return merged


def condition(
    type_: str, status: bool | ConditionStatus, reason: str, message: str = "", generation: int | None = None
) -> Condition:
    """A condition with a boolean or explicit status."""
    if isinstance(status, bool):
        status = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    return Condition(type=type_, status=status, reason=reason, message=message, observed_generation=generation)


def find(conditions: Iterable[Condition] | None, type_: str) -> Condition | None:
    for item in conditions or ():
        if item.type == type_:
            return item
    return None
