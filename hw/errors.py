"""The exception every hardware parameter check raises, and the check itself.

A parameter error is the user's (a port count of 65, a policy that does not exist), so its
message is one line naming the parameter and the allowed range. The command line catches
:class:`ParameterError` by type and reports it with exit status 2; any other exception from
``hw/`` is a bug.
"""

__all__ = ["ParameterError", "ParameterTypeError", "check_int"]


class ParameterError(ValueError):
    """A hardware parameter out of range.

    Parameters
    ----------
    message : str
        The one-line message (``"Port count must be between 2 and 64, not 65"``).
    parameter : str, optional
        The keyword the value was given as (``"ports"``), for callers that report it in
        their own terms (a command-line option, a configuration key).
    """

    def __init__(self, message, parameter=None):
        super().__init__(message)
        self.parameter = parameter


class ParameterTypeError(ParameterError, TypeError):
    """A hardware parameter of the wrong type (``"4"`` for a port count)."""


def check_int(label, value, low, high=None, *, parameter=None):
    """Check that ``value`` is an integer in ``[low, high]`` (``high=None``: no upper bound).

    Raises
    ------
    ParameterTypeError
        If ``value`` is not an integer (a ``bool`` is not).
    ParameterError
        If it is out of range. The messages read ``"{label} must be between {low} and
        {high}, not {value}"`` or ``"{label} must be at least {low}, not {value}"``.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise ParameterTypeError(f"{label} must be an integer, not {value!r}", parameter)
    if high is None:
        if value < low:
            raise ParameterError(f"{label} must be at least {low}, not {value}", parameter)
    elif not low <= value <= high:
        raise ParameterError(f"{label} must be between {low} and {high}, not {value}",
                             parameter)
    return value
