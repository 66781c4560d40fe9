"""The `lambda-idempotency` command (also `python -m lambda_idempotency`).

Local runs, from the same template.yaml that deploys (or, without one, the --table named):

    local [--background] [--port 8000]         DynamoDB Local with the template's tables,
          [--table NAME] [--print-env]         and the variables to export (eval)
    local stop                                 ... and the one --background left running
    local --valkey [--cluster] [--port 6379]   a Valkey server (or cluster) for ValkeyStore,
          [--background] [--print-env]         and IDEMPOTENCY_VALKEY_URL to export
    local stop --valkey                        ... and the one --background left running
    create-table  --endpoint URL [--table T]   the template's tables, as defined, TTL on
    invoke FUNCTION --event FILE [--endpoint]  one function, one event, a fresh process
    run-samples   [--endpoint URL]             every function with its events, in order,
                                               on an embedded DynamoDB Local

Operators, on any table (AWS or local):

    inspect  (--pk PK | --key K --namespace NS [--scope S])   one record [--result]
    inspect  --http --key HEADER_VALUE --namespace NS         an idempotent_http record, by
             (--event FILE | --principal KIND FIELD...)       the header's value and the
                                                              request's event or principal
    namespaces [--limit ITEMS]                                the namespaces in the table
    stuck    [--older-than MINUTES] [--namespace NS]          IN_PROGRESS records, paginated
    release  (--pk PK | --key ...) --yes [--force[-durable]]  let one key run again (a
                                                              tombstone, conditional on the
                                                              record shown)
    doctor   [TABLE]                                          the table's set-up, check by
                                                              check, with the fixes
    doctor   --valkey-url URL [--cluster] [--replicas N]      a Valkey server's, for
                                                              ValkeyStore

Each reads the table as the functions' store does: --layout powertools, --sort-key-attr A,
--key-attr A, --expiry-attr A, --hash-function F (Powertools' hash_function), as configured;
or, with --valkey-url URL [--cluster] [--prefix P], a ValkeyStore's records (where no table
is found: none named, no IDEMPOTENCY_TABLE, no template naming one; the URL defaults to
IDEMPOTENCY_VALKEY_URL).

One module per command group: `local_stack` (local, local stop, create-table), `run_functions`
(invoke, run-samples), `inspect_records` (inspect, namespaces, stuck), `release_record`
(release) and `doctor_table` (doctor). Below them what they share: `exits` (the exit codes,
CommandError), `project` (the SAM template), `tables` (the table an operator names, as the
functions' store reads it), `valkey_stores` (a Valkey store's, with --valkey-url), `records`
(a record as an operator sees it), `http_records` (an idempotent_http record's key and
scope, with --http) and `reach` (an endpoint that cannot be reached or refuses
the credentials). `command` builds the parser and runs a command.
"""

from .command import main

__all__ = ["main"]
