"""Campaigns: a spider or spec run over a parameter space of task units (dates,
categories, keywords) kept in the state DB with a cursor (:mod:`.space`,
:mod:`crawlfleet.state.campaigns`)."""
