"""The rules `repro.core.classify` tries in order, one small named function each, grouped by what
they judge: the client's own health (client), a request refused for what it sent (refusals), the
engines (engines), a round that failed (failed), the first hop in front that fails a fresh request
(front), and a stall every fresh path answers (stalls). What they all read is `case.Case`."""
