//! The order service's clients of other services. Both are the one edge
//! stack of `shopeasy_resilience::edge` (deadline → retry with budget →
//! breaker → bulkhead → attempt timeout → transport), configured from
//! their `resilience.<target>` settings through
//! [`EdgeSettings::config`](crate::settings::EdgeSettings::config); each
//! brings only its transport and its protocol's retry policy and breaker
//! classifier, and is exposed only through the domain's ports
//! ([`crate::stock`], [`crate::catalog`]).

pub mod inventory;
pub mod product;
