"""GraphQL shapes: strawberry types, inputs, enums and scalars. Shape only: fields that need data
ask the request context (`SchemaContext`), never the database."""
