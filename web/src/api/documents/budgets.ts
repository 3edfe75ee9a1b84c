/** Budgets (budgets.graphql, typed by graphql-codegen). */
export {
  BudgetsDocument as BUDGETS,
  DeleteBudgetDocument as DELETE_BUDGET,
  SetBudgetDocument as SET_BUDGET,
} from "../generated";
export type {
  BudgetBreach,
  BudgetFieldsFragment as Budget,
  BudgetInput,
  BudgetPeriod,
  BudgetScope,
} from "../generated";
