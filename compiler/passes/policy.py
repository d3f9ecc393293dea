"""Sharding policies: which op groups are split over which parallel axis.

A spec declares policies inside its model:

    policy full {
      split embedding, attention, mlp, lm_head over tp
      split experts over ep by all_to_all
    }

`tp` splits ops the Megatron way (columns, then rows; heads; vocab), `ep` spreads the
routed experts of a moe block over GPUs; `by all_to_all` sends tokens to the GPUs that
hold their experts (dispatch and combine), the default `by all_reduce` keeps tokens
replicated and sums the partial expert outputs. Groups a policy does not name are
replicated on every GPU. `compiler/passes/parallel.py` derives the rest from the graph.

A spec that declares no policy gets `full` derived from its conventional group names
(STANDARD_SPLIT, the split import-hf writes): nothing is replicated silently, and a
group that holds weights outside that list refuses tp > 1 (the sharding pass's check).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from infest.dsl import ast
from infest.dsl.errors import SpecError, did_you_mean, fail

if TYPE_CHECKING:
    from infest.compiler.core.graph import CompiledModel, OpNode

AXES = {"tp": "tensor parallel", "ep": "expert parallel"}
MODES = ("all_reduce", "all_to_all")
DEFAULT_POLICY = "full"
# The standard split by conventional group name (vLLM's and Megatron's): what import-hf
# writes into `policy full` (compiler/hf/render.py) and what a spec without a policy gets.
STANDARD_TP = ("embedding", "attention", "mlp", "shared_expert", "lm_head")
STANDARD_EP = ("experts",)                                   # over ep by all_to_all
STANDARD_REPLICATED = ("norm", "router", "latent", "indexer")
STANDARD_GROUPS = STANDARD_TP + STANDARD_EP + STANDARD_REPLICATED


@dataclass(frozen=True)
class Policy:
    """A checked policy: group -> axis, and how routed tokens reach their experts."""

    name: str
    axis: dict[str, str] = field(default_factory=dict)
    mode: dict[str, str] = field(default_factory=dict)
    derived: bool = False   # derived from group names (the spec declares no policy)

    def split(self, group: str) -> str | None:
        """The axis a group is split over, or None if replicated."""
        return self.axis.get(group)


def policy_errors(defs: Iterable[ast.PolicyDef], ops: list["OpNode"]) -> list[SpecError]:
    """Every problem with the declared policies, located at the offending split."""
    groups = {op.group for op in ops}
    routed = {op.group for op in ops if op.experts is not None}
    errors: list[SpecError] = []
    for d in defs:
        seen: set[str] = set()
        for split in d.splits:
            errors += _split_errors(split, groups, routed, seen)
    return errors


def _split_errors(split: ast.Split, groups: set[str], routed: set[str],
                  seen: set[str]) -> list[SpecError]:
    errors = []
    if split.axis not in AXES:
        errors.append(fail(split.span, f"unknown parallel axis '{split.axis}'",
                           did_you_mean(split.axis, AXES) or "axes: tp, ep"))
    if split.by is not None and split.by not in MODES:
        errors.append(fail(split.span, f"unknown collective '{split.by}'",
                           f"write `by {MODES[0]}` or `by {MODES[1]}`"))
    elif split.by is not None and split.axis != "ep":
        errors.append(fail(split.span, "`by ...` chooses how tokens reach experts: only with `over ep`"))
    for group in split.groups:
        errors += _group_errors(split, group, groups, routed, seen)
        seen.add(group)
    return errors


def _group_errors(split: ast.Split, group: str, groups: set[str], routed: set[str],
                  seen: set[str]) -> list[SpecError]:
    if group not in groups:
        return [fail(split.span, f"no op is in group '{group}'",
                     did_you_mean(group, groups) or f"groups: {', '.join(sorted(groups))}")]
    if group in seen:
        return [fail(split.span, f"group '{group}' is split twice in this policy")]
    if split.axis == "ep" and group not in routed:
        return [fail(split.span, f"group '{group}' has no routed experts to spread",
                     "`over ep` spreads the body of a moe block; split other groups `over tp`")]
    return []


def resolve_policy(model: "CompiledModel", name: str | None) -> Policy:
    """The policy to apply: the named one, else `full`, else the first declared; a model
    that declares none gets `full` derived from its group names (derived_policy)."""
    if not model.policies and name in (None, DEFAULT_POLICY):
        return derived_policy(model)
    if name is None:
        name = DEFAULT_POLICY if DEFAULT_POLICY in model.policies else next(iter(model.policies))
    if name not in model.policies:
        declared = ", ".join(model.policies) or "none"
        raise fail(None, f"--policy {name}: model '{model.name}' declares no such policy",
                   did_you_mean(name, model.policies) or f"declared: {declared}")
    return _checked(model.policies[name])


def _checked(d: ast.PolicyDef) -> Policy:
    axis = {g: s.axis for s in d.splits for g in s.groups}
    mode = {g: s.by or MODES[0] for s in d.splits for g in s.groups if s.axis == "ep"}
    return Policy(d.name, axis, mode)


def derived_policy(model: "CompiledModel") -> Policy:
    """`full` from the model's group names: STANDARD_TP over tp, routed `experts` over ep
    by all_to_all, the rest replicated (a weight-bearing group outside STANDARD_GROUPS
    then refuses tp > 1: compiler/passes/parallel.py)."""
    groups = {op.group for op in model.ops}
    routed = {op.group for op in model.ops if op.experts is not None}
    axis = {g: "tp" for g in STANDARD_TP if g in groups}
    axis.update({g: "ep" for g in STANDARD_EP if g in routed})
    mode = {g: "all_to_all" for g, a in axis.items() if a == "ep"}
    return Policy(DEFAULT_POLICY, axis, mode, derived=True)


def unplaced(policy: Policy, group: str) -> bool:
    """Whether a derived policy has no rule for this group (not a conventional name)."""
    return policy.derived and group not in STANDARD_GROUPS
