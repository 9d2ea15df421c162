-- Usage accounting and budgets.
--
-- usage_calls: one row per provider call that answered, keyed by its
-- provider.response event's idempotency key and written in the transaction
-- that stores that event, so a retried attempt can never count twice.
CREATE TABLE usage_calls (
	session_id         text NOT NULL,
	idem_key           text NOT NULL,
	at                 timestamptz NOT NULL DEFAULT now(),
	client_key_id      text NOT NULL,
	profile_id         text NOT NULL,
	provider           text NOT NULL,
	model              text NOT NULL,
	input_tokens       bigint NOT NULL,
	output_tokens      bigint NOT NULL,
	cache_read_tokens  bigint NOT NULL,
	cache_write_tokens bigint NOT NULL,
	cost_nanousd       bigint NOT NULL,
	PRIMARY KEY (session_id, idem_key)
);

-- usage_totals: the calls summed per session, UTC day, client key (the
-- key whose turn made the call) and provider entry; the profile is the
-- session's. Every grouped read and a session's budget sum it.
CREATE TABLE usage_totals (
	session_id         text NOT NULL,
	day                date NOT NULL,
	client_key_id      text NOT NULL,
	provider           text NOT NULL,
	profile_id         text NOT NULL,
	calls              bigint NOT NULL,
	input_tokens       bigint NOT NULL,
	output_tokens      bigint NOT NULL,
	cache_read_tokens  bigint NOT NULL,
	cache_write_tokens bigint NOT NULL,
	cost_nanousd       bigint NOT NULL,
	PRIMARY KEY (session_id, day, client_key_id, provider)
);
CREATE INDEX usage_totals_day ON usage_totals (day);
CREATE INDEX usage_totals_key_day ON usage_totals (client_key_id, day);
CREATE INDEX usage_totals_profile_day ON usage_totals (profile_id, day);

-- usage_subjects: the same sums per client key and per profile and day,
-- so a key or profile budget reads at most one row per day of its period
-- however many sessions spent it.
CREATE TABLE usage_subjects (
	scope        text NOT NULL,
	subject      text NOT NULL,
	day          date NOT NULL,
	tokens       bigint NOT NULL,
	cost_nanousd bigint NOT NULL,
	PRIMARY KEY (scope, subject, day)
);

-- budgets: at most one per client key, profile or session. The amount
-- spent is never stored here: it is read from the usage tables (the one
-- source of truth for every replica); a reset keeps what the period had
-- spent when it was reset (reset_base) and subtracts it while that period
-- lasts.
CREATE TABLE budgets (
	scope        text NOT NULL CHECK (scope IN ('key', 'profile', 'session')),
	subject      text NOT NULL,
	unit         text NOT NULL CHECK (unit IN ('tokens', 'usd')),
	limit_amount bigint NOT NULL CHECK (limit_amount >= 0),
	period       text NOT NULL CHECK (period IN ('day', 'week', 'month', 'none')),
	reset_at     timestamptz,
	reset_base   bigint NOT NULL DEFAULT 0,
	created_at   timestamptz NOT NULL DEFAULT now(),
	updated_at   timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (scope, subject)
);

-- budget_changes: every set, reset and removal of a budget, who made it,
-- and the budget before and after.
CREATE TABLE budget_changes (
	id      bigserial PRIMARY KEY,
	at      timestamptz NOT NULL DEFAULT now(),
	actor   text NOT NULL,
	action  text NOT NULL,
	scope   text NOT NULL,
	subject text NOT NULL,
	before  json,
	after   json
);
