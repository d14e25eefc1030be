"""The main job (``innet run``, ``innet sweep``): configuration (``config``), one point
(``point``), the metrics of docs/metrics.md (``metrics``), running the points on an executor
(``run``), the tables (``tables``), the report's words (``answer``) and writing
``results/<run>/`` (``report``)."""
