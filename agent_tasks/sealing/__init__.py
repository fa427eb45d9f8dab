"""The sealing of event text: a key tree per writer and task (``keytree``), what sealing needs of
a key store (``keys``), and the AES-GCM sealing and opening of events (``seal``)."""
