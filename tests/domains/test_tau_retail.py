"""τ-bench retail: gold replays score 1, wrong trajectories 0, every tool's checks and effects as τ-bench's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tau_oracle import oracle_messages, run_actions, score
from tau_sources import tau_task_source

from muarl.data.store import DataNotFound, find_root
from muarl.domains import load_domain
from muarl.domains.base import ArgumentError, ToolError
from muarl.domains.tau.loader import TauDataError, tasks_from_python
from muarl.reward import outcome_reward
from muarl.types import Action

# τ-bench's retail tools and their required arguments (the public interface models are trained against)
REQUIRED = {
    "calculate": ["expression"],
    "cancel_pending_order": ["order_id", "reason"],
    "exchange_delivered_order_items": ["order_id", "item_ids", "new_item_ids", "payment_method_id"],
    "find_user_id_by_email": ["email"],
    "find_user_id_by_name_zip": ["first_name", "last_name", "zip"],
    "get_order_details": ["order_id"],
    "get_product_details": ["product_id"],
    "get_user_details": ["user_id"],
    "list_all_product_types": [],
    "modify_pending_order_address": ["order_id", "address1", "address2", "city", "state", "country", "zip"],
    "modify_pending_order_items": ["order_id", "item_ids", "new_item_ids", "payment_method_id"],
    "modify_pending_order_payment": ["order_id", "payment_method_id"],
    "modify_user_address": ["user_id", "address1", "address2", "city", "state", "country", "zip"],
    "return_delivered_order_items": ["order_id", "item_ids", "payment_method_id"],
    "think": ["thought"],
    "transfer_to_human_agents": ["summary"],
}


def call(domain, db, name, **kwargs):
    return domain.run_tool(db, name, kwargs)


def test_tools_match_tau_bench_interface(retail):
    assert retail.tools.names() == list(REQUIRED)
    for t in retail.tools:
        assert t.spec.parameters["required"] == REQUIRED[t.name], t.name
        assert list(t.spec.parameters["properties"]) == REQUIRED[t.name], t.name
        assert t.spec.description
    assert retail.tools["transfer_to_human_agents"].terminal
    assert retail.tools["cancel_pending_order"].spec.parameters["properties"]["reason"]["enum"] == ["no longer needed", "ordered by mistake"]
    assert retail.greeting == "Hi! How can I help you today?"
    assert retail.system_prompt().startswith("# Retail agent policy")


@pytest.mark.parametrize("split,count", [("train", 500), ("dev", 20), ("test", 115)])
def test_gold_replay_scores_one_on_every_task(retail, split, count):
    tasks = retail.tasks(split)
    assert len(tasks) == count
    for task in tasks:
        info = score(retail, task, task.actions)
        assert info.reward == 1.0, task.id
    assert retail.base.recompute_digest() == retail.base.digest  # no tool mutated the shared seed data


def test_task_ids_are_unique_across_splits(retail):
    ids = [t.id for s in retail.splits for t in retail.tasks(s)]
    assert len(ids) == len(set(ids)) == 635
    assert retail.task("dev-3").split == "dev"


def test_talking_only_scores_zero_whenever_the_task_needs_a_write(retail):
    fresh = retail.new_state().hash()
    needing_writes = 0
    for split in retail.splits:
        for task in retail.tasks(split):
            if retail.gold_hash(task) == fresh:
                continue
            needing_writes += 1
            assert outcome_reward(retail, task, fresh, oracle_messages(task, [])).reward == 0.0, task.id
    assert needing_writes > 600


def test_missing_outputs_score_zero(retail):
    task = next(t for t in retail.tasks("test") if t.outputs)
    assert score(retail, task, task.actions, say="I cannot tell you that.").reward == 0.0
    # outputs are matched case-insensitively with commas removed from what the agent said
    assert score(retail, task, task.actions, say=" ".join(o.upper() for o in task.outputs)).reward == 1.0


def _replace(task, index, **kwargs):
    actions = list(task.actions)
    actions[index] = Action(name=actions[index].name, kwargs={**actions[index].kwargs, **kwargs})
    return actions


def test_perturbed_gold_actions_score_zero(retail):
    task = retail.task("test-0")  # exchange two items of delivered order #W2378156
    assert task.actions[-1].name == "exchange_delivered_order_items"
    another_item = _replace(task, -1, new_item_ids=["6342039236", "7747408585"])  # another available keyboard
    assert score(retail, task, another_item).reward == 0.0
    missing_step = task.actions[:-1]
    assert score(retail, task, missing_step).reward == 0.0
    extra_write = task.actions + [Action(name="modify_user_address", kwargs={
        "user_id": "yusuf_rossi_9620", "address1": "1 Elm St", "address2": "", "city": "Philadelphia",
        "state": "PA", "country": "USA", "zip": "19122"})]
    assert score(retail, task, extra_write).reward == 0.0
    payment_task = next(t for t in retail.tasks("test") if any(a.name == "modify_pending_order_payment" for a in t.actions))
    i = next(i for i, a in enumerate(payment_task.actions) if a.name == "modify_pending_order_payment")
    order = retail.base.tables["orders"][payment_task.actions[i].kwargs["order_id"]]
    methods = retail.base.tables["users"][order["user_id"]]["payment_methods"]
    other = next(m for m in methods if m not in (payment_task.actions[i].kwargs["payment_method_id"], order["payment_history"][0]["payment_method_id"]))
    assert score(retail, payment_task, _replace(payment_task, i, payment_method_id=other)).reward == 0.0


# ---------------------------------------------------------------- tool checks and effects


def test_lookups_and_their_errors(retail):
    s = retail.new_state()
    assert call(retail, s, "find_user_id_by_email", email="YUSUF.ROSSI7301@example.com") == "yusuf_rossi_9620"
    assert call(retail, s, "find_user_id_by_name_zip", first_name="yusuf", last_name="ROSSI", zip="19122") == "yusuf_rossi_9620"
    assert json.loads(call(retail, s, "get_order_details", order_id="#W2378156"))["user_id"] == "yusuf_rossi_9620"
    products = json.loads(call(retail, s, "list_all_product_types"))
    assert len(products) == 50 and list(products) == sorted(products)
    for name, kwargs, message in [
        ("find_user_id_by_email", {"email": "nobody@example.com"}, "user not found"),
        ("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": "00000"}, "user not found"),
        ("get_user_details", {"user_id": "nobody_1"}, "user not found"),
        ("get_order_details", {"order_id": "W2378156"}, "order not found"),
        ("get_product_details", {"product_id": "6086499569"}, "product not found"),
        ("calculate", {"expression": "import os"}, "invalid characters in expression"),
        ("calculate", {"expression": "1 / 0"}, "division by zero"),
    ]:
        with pytest.raises(ToolError) as err:
            call(retail, s, name, **kwargs)
        assert str(err.value) == message, name
    assert call(retail, s, "calculate", expression="(272.33 - 269.16) * 2") == "6.34"
    assert call(retail, s, "think", thought="hmm") == ""
    assert call(retail, s, "transfer_to_human_agents", summary="x") == "Transfer successful"


def test_wrongly_typed_values_tau_bench_accepts_change_the_state_as_there(retail):
    """τ-bench hands the model's JSON to its tools unchecked; these go through there, so they must here (issue 11, item 14)."""
    s = retail.new_state()
    returned = json.loads(call(retail, s, "return_delivered_order_items", order_id="#W2378156", item_ids="", payment_method_id="credit_card_9513926"))
    assert returned["status"] == "return requested" and returned["return_items"] == []
    s = retail.new_state()
    exchanged = json.loads(call(retail, s, "exchange_delivered_order_items", order_id="#W2378156", item_ids="", new_item_ids={},
                                payment_method_id="credit_card_9513926"))
    assert exchanged["status"] == "exchange requested" and exchanged["exchange_items"] == exchanged["exchange_new_items"] == []
    assert exchanged["exchange_price_difference"] == 0
    s = retail.new_state()
    modified = json.loads(call(retail, s, "modify_pending_order_items", order_id="#W8367380", item_ids="", new_item_ids="",
                               payment_method_id="credit_card_5683823"))
    assert modified["status"] == "pending (item modified)"
    assert modified["payment_history"][-1] == {"transaction_type": "refund", "amount": 0, "payment_method_id": "credit_card_5683823"}
    s = retail.new_state()
    address = {"address1": "1 Elm St", "address2": "", "city": "Philadelphia", "state": "PA", "country": "USA", "zip": 19122}
    assert json.loads(call(retail, s, "modify_user_address", user_id="yusuf_rossi_9620", **address))["address"]["zip"] == 19122
    assert s.get("users", "yusuf_rossi_9620")["address"]["zip"] == 19122  # stored as the integer it was given
    assert json.loads(call(retail, s, "modify_pending_order_address", order_id="#W8367380", **address))["address"]["zip"] == 19122
    assert call(retail, s, "think", thought=42) == ""
    assert call(retail, s, "transfer_to_human_agents", summary=None) == "Transfer successful"


@pytest.mark.parametrize(("name", "arguments", "message"), [
    ("cancel_pending_order", {"order_id": "#W8367380", "reason": "changed my mind"}, "invalid reason"),
    ("return_delivered_order_items", {"order_id": "#W2378156", "item_ids": "1151293680", "payment_method_id": "credit_card_9513926"},
     "some item not found"),  # a string is iterated character by character
    ("return_delivered_order_items", {"order_id": "#W2378156", "item_ids": 1151293680, "payment_method_id": "credit_card_9513926"},
     "'int' object is not iterable"),
    ("return_delivered_order_items", {"order_id": "#W2378156", "item_ids": {"1151293680": 1}, "payment_method_id": "credit_card_9513926"},
     "'dict' object has no attribute 'count'"),
    ("exchange_delivered_order_items", {"order_id": "#W2378156", "item_ids": [], "new_item_ids": 7, "payment_method_id": "credit_card_9513926"},
     "object of type 'int' has no len()"),
    ("get_order_details", {"order_id": ["#W2378156"]}, "unhashable type: 'list'"),
    ("find_user_id_by_name_zip", {"first_name": "nobody", "last_name": 7, "zip": "19122"}, "user not found"),
    ("find_user_id_by_name_zip", {"first_name": "yusuf", "last_name": 7, "zip": "19122"}, "'int' object has no attribute 'lower'"),
])
def test_wrongly_typed_values_tau_bench_refuses_are_refused_with_its_text(retail, name, arguments, message):
    s = retail.new_state()
    with pytest.raises(ToolError) as err:
        call(retail, s, name, **arguments)
    assert str(err.value) == message
    assert s.hash() == retail.new_state().hash()


def test_argument_names_are_still_checked(retail):
    s = retail.new_state()
    with pytest.raises(ArgumentError, match="missing"):
        call(retail, s, "get_order_details")
    with pytest.raises(ArgumentError, match="unexpected"):
        call(retail, s, "get_order_details", order_id="#W2378156", verbose=True)


def test_cancel_refunds_gift_cards_at_once(retail):
    s = retail.new_state()
    order = json.loads(call(retail, s, "cancel_pending_order", order_id="#W6779827", reason="no longer needed"))
    assert order["status"] == "cancelled" and order["cancel_reason"] == "no longer needed"
    assert order["payment_history"][-1] == {"transaction_type": "refund", "amount": 4079.45, "payment_method_id": "gift_card_7219486"}
    assert s.get("users", "ethan_lopez_6291")["payment_methods"]["gift_card_7219486"]["balance"] == round(49 + 4079.45, 2)
    assert retail.base.tables["users"]["ethan_lopez_6291"]["payment_methods"]["gift_card_7219486"]["balance"] == 49
    with pytest.raises(ToolError, match="^non-pending order cannot be cancelled$"):
        call(retail, s, "cancel_pending_order", order_id="#W6779827", reason="no longer needed")
    with pytest.raises(ToolError, match="^order not found$"):
        call(retail, s, "cancel_pending_order", order_id="#W0", reason="no longer needed")


def test_modify_payment_checks(retail):
    s = retail.new_state()
    with pytest.raises(ToolError, match="^insufficient gift card balance to pay for the order$"):
        call(retail, s, "modify_pending_order_payment", order_id="#W8367380", payment_method_id="gift_card_1994993")
    with pytest.raises(ToolError, match="^payment method not found$"):
        call(retail, s, "modify_pending_order_payment", order_id="#W8367380", payment_method_id="paypal_1")
    with pytest.raises(ToolError, match="^the new payment method should be different from the current one$"):
        call(retail, s, "modify_pending_order_payment", order_id="#W8367380", payment_method_id="credit_card_5683823")
    with pytest.raises(ToolError, match="^non-pending order cannot be modified$"):
        call(retail, s, "modify_pending_order_payment", order_id="#W2611340", payment_method_id="credit_card_5683823")
    order = json.loads(call(retail, s, "modify_pending_order_payment", order_id="#W6779827", payment_method_id=next(
        m for m in retail.base.tables["users"]["ethan_lopez_6291"]["payment_methods"] if m != "gift_card_7219486")))
    assert [p["transaction_type"] for p in order["payment_history"]] == ["payment", "payment", "refund"]
    with pytest.raises(ToolError, match="^there should be exactly one payment for a pending order$"):
        call(retail, s, "modify_pending_order_payment", order_id="#W6779827", payment_method_id="gift_card_7219486")


def test_modify_items_checks_and_effects(retail):
    s = retail.new_state()
    with pytest.raises(ToolError, match="^9999999999 not found$"):
        call(retail, s, "modify_pending_order_items", order_id="#W8367380", item_ids=["9999999999"], new_item_ids=["1"], payment_method_id="credit_card_5683823")
    with pytest.raises(ToolError, match="^the number of items to be exchanged should match$"):
        call(retail, s, "modify_pending_order_items", order_id="#W8367380", item_ids=["2444431651"], new_item_ids=[], payment_method_id="credit_card_5683823")
    with pytest.raises(ToolError, match="^new item 8140269513 not found or available$"):
        call(retail, s, "modify_pending_order_items", order_id="#W8367380", item_ids=["2444431651"], new_item_ids=["8140269513"], payment_method_id="credit_card_5683823")
    order = json.loads(call(retail, s, "modify_pending_order_items", order_id="#W8367380", item_ids=["2444431651"],
                            new_item_ids=["8068777068"], payment_method_id="gift_card_1994993"))
    assert order["status"] == "pending (item modified)"
    swapped = next(i for i in order["items"] if i["item_id"] == "8068777068")
    assert swapped["price"] == 507.13
    assert order["payment_history"][-1]["transaction_type"] == "refund"
    assert order["payment_history"][-1]["amount"] == pytest.approx(534.84 - 507.13)
    assert s.get("users", "ava_nguyen_6646")["payment_methods"]["gift_card_1994993"]["balance"] == round(78 + 534.84 - 507.13, 2)
    with pytest.raises(ToolError, match="^non-pending order cannot be modified$"):
        call(retail, s, "modify_pending_order_items", order_id="#W8367380", item_ids=["8068777068"], new_item_ids=["2444431651"], payment_method_id="gift_card_1994993")


def test_exchange_and_return_checks(retail):
    s = retail.new_state()
    base_kwargs = {"order_id": "#W2378156", "item_ids": ["1151293680"], "new_item_ids": ["7706410293"], "payment_method_id": "credit_card_9513926"}
    with pytest.raises(ToolError, match="^non-delivered order cannot be exchanged$"):
        call(retail, s, "exchange_delivered_order_items", **{**base_kwargs, "order_id": "#W8367380"})
    with pytest.raises(ToolError, match="^1151293680 not found$"):
        call(retail, s, "exchange_delivered_order_items", **{**base_kwargs, "item_ids": ["1151293680", "1151293680"], "new_item_ids": ["7706410293"] * 2})
    with pytest.raises(ToolError, match="^new item 9690244451 not found or available$"):
        call(retail, s, "exchange_delivered_order_items", **{**base_kwargs, "new_item_ids": ["9690244451"]})
    with pytest.raises(ToolError, match="^payment method not found$"):
        call(retail, s, "exchange_delivered_order_items", **{**base_kwargs, "payment_method_id": "gift_card_0"})
    with pytest.raises(ToolError, match="^non-delivered order cannot be returned$"):
        call(retail, s, "return_delivered_order_items", order_id="#W8367380", item_ids=["2444431651"], payment_method_id="credit_card_5683823")
    with pytest.raises(ToolError, match="^some item not found$"):
        call(retail, s, "return_delivered_order_items", order_id="#W2378156", item_ids=["1"], payment_method_id="credit_card_9513926")
    order = json.loads(call(retail, s, "exchange_delivered_order_items", **base_kwargs))
    assert order["status"] == "exchange requested" and order["exchange_price_difference"] == round(269.16 - 272.33, 2)
    with pytest.raises(ToolError, match="^non-delivered order cannot be returned$"):
        call(retail, s, "return_delivered_order_items", order_id="#W2378156", item_ids=["1151293680"], payment_method_id="credit_card_9513926")


def test_insufficient_gift_card_for_a_pending_swap(retail):
    s = retail.new_state()
    s.edit("users", "ava_nguyen_6646")["payment_methods"]["gift_card_1994993"]["balance"] = 1
    with pytest.raises(ToolError, match="^insufficient gift card balance to pay for the new item$"):
        call(retail, s, "modify_pending_order_items", order_id="#W8367380", item_ids=["8733974883"],
             new_item_ids=["9385662952"], payment_method_id="gift_card_1994993")  # 153.18 -> 159.92


def test_return_refund_must_go_to_original_method_or_gift_card(retail):
    s = retail.new_state()
    user = "ava_moore_2033"
    s.edit("users", user)["payment_methods"]["credit_card_1"] = {"source": "credit_card", "id": "credit_card_1"}
    with pytest.raises(ToolError, match="^payment method should be either the original payment method or a gift card$"):
        call(retail, s, "return_delivered_order_items", order_id="#W4817420", item_ids=["6777246137"], payment_method_id="credit_card_1")
    order = json.loads(call(retail, s, "return_delivered_order_items", order_id="#W4817420", item_ids=["6777246137"], payment_method_id="gift_card_8168843"))
    assert order["status"] == "return requested" and order["return_items"] == ["6777246137"]


def test_user_and_order_address_changes(retail):
    s = retail.new_state()
    address = {"address1": "1 Elm St", "address2": "", "city": "Austin", "state": "TX", "country": "USA", "zip": "73301"}
    with pytest.raises(ToolError, match="^user not found$"):
        call(retail, s, "modify_user_address", user_id="nobody_1", **address)
    assert json.loads(call(retail, s, "modify_user_address", user_id="ava_nguyen_6646", **address))["address"] == address
    with pytest.raises(ToolError, match="^non-pending order cannot be modified$"):
        call(retail, s, "modify_pending_order_address", order_id="#W2611340", **address)
    assert json.loads(call(retail, s, "modify_pending_order_address", order_id="#W8367380", **address))["address"] == address


def test_state_hash_resets_between_episodes(retail):
    task = retail.task("test-0")
    assert run_actions(retail, task.actions) == retail.gold_hash(task)
    assert retail.new_state().hash() != retail.gold_hash(task)


# ---------------------------------------------------------------- data layouts


def test_checkout_layout_reads_python_task_files_without_running_them(tmp_path: Path, retail):
    src = find_root("tau-bench") / "tau-bench" / "retail"
    envs = tmp_path / "tau_bench" / "envs" / "retail"
    (envs / "data").mkdir(parents=True)
    for table in ("users", "orders", "products"):
        (envs / "data" / f"{table}.json").symlink_to(src / f"{table}.json")
    (envs / "wiki.md").write_text("# wiki policy\n")
    (envs / "tasks_dev.py").write_text(tau_task_source(json.loads((src / "tasks_dev.json").read_text()), "TASKS_DEV"))
    domain = load_domain("tau-retail", str(tmp_path))
    assert domain.policy == "# wiki policy\n"
    assert [t.model_dump(exclude={"metadata"}) for t in domain.tasks("dev")] == [t.model_dump(exclude={"metadata"}) for t in retail.tasks("dev")]
    with pytest.raises(TauDataError, match="tasks_test.py"):
        domain.tasks("test")


def test_task_file_parser_refuses_code():
    with pytest.raises(TauDataError, match="unexpected call"):
        tasks_from_python("TASKS = [Task(user_id=__import__('os').getcwd())]")


def test_missing_data_says_how_to_get_it(tmp_path, monkeypatch):
    with pytest.raises(TauDataError, match="muarl data pull tau-bench"):
        load_domain("tau-retail", str(tmp_path))
    with pytest.raises(DataNotFound, match="does not exist"):
        load_domain("tau-retail", str(tmp_path / "nope"))
    monkeypatch.setenv("MUARL_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DataNotFound, match=r"no tau2-bench data found \(looked in .*empty, .*cache.*\): run `muarl data pull tau2-bench`"):
        load_domain("tau2-retail")
