"""What operators read about groups: `group_reports` (GroupReport, the console's rows), `journal` (the
operator journal), `history` (offset history), `health` (Burrow-style health), `lag`, `overview`
(GroupOverview pages)."""
