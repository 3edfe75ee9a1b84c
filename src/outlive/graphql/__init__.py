"""GraphQL over HTTP: one pipeline (`http.Pipeline.serve`) from the request to its JSON.

It sits between the composition roots (`outlive.app`) and the fields (`outlive.resolvers`,
`outlive.schema`): it may import them; they never import it.
"""
