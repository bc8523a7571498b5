"""Operations on a live fleet through Redis (jobs, their figures, control, limits,
seeds): the functions that ``crawlfleet`` commands and the manager's API both call."""
