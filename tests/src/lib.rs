//! Shared helpers of the integration tests: fixture paths and loaders.
