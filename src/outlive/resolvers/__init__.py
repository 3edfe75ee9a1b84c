"""GraphQL resolvers: they authenticate, scope to the tenant, and call services."""
