"""The price catalog and the accounting of a turn's usage (sources, estimated cost)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrun import PriceCatalog, Usage, default_prices
from agentrun._vocabulary.prices import account_usage

CATALOG = PriceCatalog(
    {
        "models": {
            "model-a": {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15,
                        "aliases": ["model-a-20250101"]},
            "model-b": {"input": 2, "output": 8},
        }
    }
)  # fmt: skip


def test_cost_prices_each_kind_of_token_and_falls_back_to_the_input_price() -> None:
    usage = Usage(input_tokens=1000, cache_read_tokens=10_000, cache_write_tokens=2000,
                  output_tokens=500)  # fmt: skip
    assert CATALOG.estimate(usage, "model-a") == pytest.approx(
        (1000 * 3 + 10_000 * 0.3 + 2000 * 3.75 + 500 * 15) / 1e6
    )
    # No cache prices: cache reads and writes cost what input costs.
    assert CATALOG.estimate(usage, "model-b") == pytest.approx((13_000 * 2 + 500 * 8) / 1e6)
    assert CATALOG.estimate(Usage(), "model-a") is None
    assert CATALOG.estimate(usage, "unknown") is None
    assert CATALOG.estimate(usage, None) is None


@pytest.mark.parametrize(
    "name",
    ["model-a", "MODEL-A", "provider/model-a", "model-a-20250101", "model-a-2025-01-01",
     "model-a-20991231", "$runtime|openai|model-a(openai)", "$runtime|openai|provider/model-a"],
)  # fmt: skip
def test_lookup_ignores_case_provider_prefix_release_dates_and_decorations(name: str) -> None:
    found = CATALOG.lookup(name)
    assert found is not None and found.id == "model-a"


def test_an_entry_without_input_and_output_prices_is_refused() -> None:
    with pytest.raises(ValueError, match="needs an input and an output price"):
        PriceCatalog({"models": {"half": {"input": 1}}})
    with pytest.raises(ValueError, match="needs an input and an output price"):
        PriceCatalog({"models": {"negative": {"input": -1, "output": 2}}})


def test_the_builtin_prices_cover_the_models_the_agents_default_to() -> None:
    prices = default_prices()
    assert len(prices) > 50
    for model in ("claude-sonnet-4-5-20250929", "claude-opus-4-1", "gpt-5", "gemini-2.5-pro"):
        found = prices.lookup(model)
        assert found is not None, model
        assert found.input > 0 and found.output > found.input, model
        assert found.source, model


def test_a_users_file_is_merged_over_the_builtin_prices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = tmp_path / "prices.json"
    extra.write_text(json.dumps({"models": {"gpt-5": {"input": 100, "output": 200}}}))
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(extra))
    found = default_prices().lookup("gpt-5")
    assert found is not None and (found.input, found.output) == (100, 200)


def test_account_states_sources_and_estimates_only_what_nobody_reported() -> None:
    tokens = Usage(input_tokens=1000, output_tokens=100)
    reported = account_usage(tokens.model_copy(update={"cost_usd": 0.5}), model="model-b",
                             prices=CATALOG)  # fmt: skip
    assert (reported.cost_usd, reported.usage_source, reported.cost_source) == (
        0.5,
        "reported",
        "reported",
    )
    estimated = account_usage(tokens, model="model-b", tokens="derived", prices=CATALOG)
    assert estimated.cost_usd == pytest.approx((1000 * 2 + 100 * 8) / 1e6)
    assert (estimated.usage_source, estimated.cost_source) == ("derived", "estimated")
    unknown = account_usage(tokens, model="nobody-knows", prices=CATALOG)
    assert (unknown.cost_usd, unknown.cost_source) == (None, "unavailable")
    # Tokens that are not the turn's own (a running total) are never priced.
    forbidden = account_usage(tokens, model="model-b", cost="unavailable", prices=CATALOG)
    assert (forbidden.cost_usd, forbidden.cost_source) == (None, "unavailable")
    cost_only = account_usage(Usage(cost_usd=0.2), model=None, cost="derived", prices=CATALOG)
    assert (cost_only.usage_source, cost_only.cost_source) == ("unavailable", "derived")
    assert account_usage(None, model="model-b", prices=CATALOG) is None


def test_figures_without_their_split_are_reported_tokens_never_priced() -> None:
    # A whole prompt with its cache reads inside and an output without its thoughts: no price
    # applies to them (cache reads and thinking are priced apart).
    unsplit = Usage(whole_prompt_tokens=24_000, answer_tokens=40)
    accounted = account_usage(unsplit, model="model-b", prices=CATALOG)
    assert (accounted.usage_source, accounted.cost_source) == ("reported", "unavailable")
    assert accounted.cost_usd is None
    assert (accounted.whole_prompt_tokens, accounted.answer_tokens) == (24_000, 40)


def test_a_sum_is_as_good_as_its_weakest_known_part() -> None:
    reported = Usage(output_tokens=1, cost_usd=0.1, usage_source="reported", cost_source="reported")
    estimated = Usage(output_tokens=1, cost_usd=0.1, usage_source="reported",
                      cost_source="estimated")  # fmt: skip
    unknown = Usage(output_tokens=1, usage_source="reported", cost_source="unavailable")
    assert (reported + estimated).cost_source == "estimated"
    assert (estimated + reported).cost_source == "estimated"
    assert (reported + unknown).cost_source == "reported"
    assert (unknown + unknown).cost_source == "unavailable"
    assert (Usage() + reported).cost_source == "reported"


def test_a_price_catalog_matches_a_name_again_after_it_is_extended() -> None:
    catalog = PriceCatalog({"models": {}})
    assert catalog.lookup("acme/fake-model-2025-01-01") is None
    catalog.extend({"models": {"fake-model": {"input": 1, "output": 2}}})
    found = catalog.lookup("acme/fake-model-2025-01-01")
    assert found is not None and (found.input, found.output) == (1, 2)
    catalog.extend({"models": {"fake-model": {"input": 3, "output": 4}}})
    again = catalog.lookup("acme/fake-model-2025-01-01")
    assert again is not None and (again.input, again.output) == (3, 4)


def test_accounting_follows_the_price_variable_as_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = tmp_path / "prices.json"
    extra.write_text(json.dumps({"models": {"fake-model": {"input": 1, "output": 1}}}))
    tokens = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    monkeypatch.delenv("AGENTRUN_PRICE_CATALOG", raising=False)
    assert account_usage(tokens, model="fake-model").cost_usd is None
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(extra))
    assert account_usage(tokens, model="fake-model").cost_usd == 2.0
    monkeypatch.delenv("AGENTRUN_PRICE_CATALOG")
    assert account_usage(tokens, model="fake-model").cost_usd is None
