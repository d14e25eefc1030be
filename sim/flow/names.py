"""How the synthesis flows name a flattened netlist's parts: the block a cell or net belongs
to (``luts_by_block``, the congestion report's ``by_block``) and the bus a net is a bit of."""

import re

__all__ = ["block_of", "net_group"]


def block_of(name):
    """The block a netlist cell or net belongs to, from its name: the first instance and the
    leading name of the next component, numbers as ``*`` (``switch.egress*``), a top-level
    port's bus, or ``(top)`` (:func:`sim.flow.synth.lut_breakdown` says why)."""
    parts = name.lstrip("\\").split(".")
    if len(parts) > 1:
        lead = re.match(r"[A-Za-z]+\d*", parts[1])
        block = f"{parts[0]}.{lead.group(0) if lead else '(glue)'}"
    else:
        port = re.match(r"([ms]\d*_axis_[a-z]+)", parts[0])
        block = port.group(1) if port else "(top)"
    return re.sub(r"\d+", "*", block)


def net_group(name):
    """A net's name with its trailing indices dropped (a bit's, and an array element's before
    it: ``bank3_word[5][12]``) and numbers as ``*``: the eight egresses' copies of one bus are
    one group."""
    return re.sub(r"\d+", "*", re.sub(r"(\[\d+\])+$", "", name.lstrip("\\")))
