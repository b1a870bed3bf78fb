"""Cluster mode: several Cohort nodes share the 50 offsets partitions through etcd v3.

`etcd` is the connection, `keys` the key layout, `lease` this node's lease, `ownership` who owns
which partition (`EtcdOwnership`, an `Ownership`), `store` the fenced records (`EtcdStore`, a `Store`).
Needs the optional extra: ``pip install 'cohort[cluster]'``.
"""
