"""The web console: a page and a JSON API served by the daemon (``console.listen``).

The console is a Kafka client of the coordinator it runs beside (`access`), so every mode (one
node, ``--workers N``, a cluster on etcd) shows what any admin client of that deployment sees.
"""
