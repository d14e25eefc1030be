"""The fast switch model and the golden models: the switch at packet granularity (``switch``),
its compiled C core (``switch_core``, ``switch_core.c``), the link arbiter (``arbiter``) and
the reduction arithmetic (``reduce``). No simulator imports: these are the references the RTL is checked
against."""
