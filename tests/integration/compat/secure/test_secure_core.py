"""The secure submit with a keytab (and the ticket cache's), on the compat release and Java 11:
the secure lane's own tests, imported so they run against this cluster."""

from secure.test_kerberos import (test_pytorch_ddp_example_trains_with_a_ticket_cache,  # noqa: F401
                                  test_tensorflow_example_trains_with_principal_and_keytab_and_no_ticket)
