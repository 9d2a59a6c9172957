//! Upstream `TestPlugin` rows that apply to berth.
