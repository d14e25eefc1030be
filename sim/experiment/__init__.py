"""The main job (``innet run``, ``innet sweep``): configuration (``config``), one point
(``point``), the metrics of docs/metrics.md (``metrics``), running the points on an executor
(``run``) and writing ``results/<run>/`` (``report``)."""
