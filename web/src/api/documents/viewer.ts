/** Who is signed in, and the agents (viewer.graphql, typed by graphql-codegen). */
export { AgentsDocument as AGENTS, ViewerDocument as VIEWER } from "../generated";
