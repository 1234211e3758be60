-- $1: this transaction's statement timeout in milliseconds (text). An operator's count (a search
-- with count=true, a bulk operation's dry run and total) may need longer, or be held to less, than
-- the other statements of an API request (DL_API_COUNT_TIMEOUT_SEC over DL_API_STATEMENT_TIMEOUT_SEC);
-- set_config(..., true) is SET LOCAL with a parameter, so it ends with the transaction.
SELECT set_config('statement_timeout', $1::text, true);
