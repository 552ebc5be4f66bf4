"""Old import path of the run contract's counter checks: kvtier.records.runcontract_counters."""

from ...records.runcontract_counters import COUNTER_SUFFIXES, NEEDED, PER_REQUEST_SERIES, _is_counter, _shown, cache_config, check_counters, check_needed, check_no_restart, check_series

__all__ = ["COUNTER_SUFFIXES", "NEEDED", "PER_REQUEST_SERIES", "_is_counter", "_shown", "cache_config", "check_counters", "check_needed", "check_no_restart", "check_series"]
