"""The main job (``innet run``, ``innet sweep``): configuration (``config``), one point
(``point``), the metrics of docs/metrics.md (``metrics``), and running the points and writing
the report (``report``)."""
