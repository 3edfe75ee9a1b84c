/** A run's tree (tree.graphql, typed by graphql-codegen). */
export { RunTreeDocument as RUN_TREE } from "../generated";
export type { RunTreeQuery as RunTreeData } from "../generated";

/** How many children the Tree tab lists a page (`first:` of RunTree). */
export const CHILDREN_PAGE = 20;
